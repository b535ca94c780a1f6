"""Waiting for a condition in the tests: poll it until it holds or a deadline passes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

POLL = 0.1  # seconds between looks


async def until(
    probe: Callable[[], Awaitable[T]], holds: Callable[[T], bool], within: float = 60, what: str = ""
) -> T:
    """The first value of `probe()` for which `holds` is true; fails the test after `within` s."""
    deadline = time.monotonic() + within
    while True:
        value = await probe()
        if holds(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g}s: {what or 'condition'}; last value: {value!r}")
        await asyncio.sleep(POLL)
