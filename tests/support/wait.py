"""Waiting for a condition in the tests: poll it until it holds or a deadline passes.

The one way the tests wait: never a sleep standing in for a barrier.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")

POLL = 0.1  # seconds between looks


@overload
async def until(
    probe: Callable[[], Awaitable[T]],
    holds: Callable[[T], object] = ...,
    within: float = ...,
    what: str = ...,
    every: float = ...,
) -> T: ...
@overload
async def until(
    probe: Callable[[], T],
    holds: Callable[[T], object] = ...,
    within: float = ...,
    what: str = ...,
    every: float = ...,
) -> T: ...
async def until(
    probe: Callable[[], Any],
    holds: Callable[[Any], object] = bool,
    within: float = 60,
    what: str = "",
    every: float = POLL,
) -> Any:
    """The first value of `probe()` (awaited if need be) for which `holds` is true (by default: the
    first true value); fails the test after `within` s, looking every `every` s."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if holds(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g}s: {what or 'condition'}; last value: {value!r}")
        await asyncio.sleep(every)


def wait_for(probe: Callable[[], T], within: float = 60, what: str = "", every: float = POLL) -> T:
    """`until` for a test that cannot run an event loop (Playwright's sync API runs its own)."""
    deadline = time.monotonic() + within
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g}s: {what or 'condition'}; last value: {value!r}")
        time.sleep(every)
