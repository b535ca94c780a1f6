"""Concurrency helpers: bounded fan-out of broker round trips, brief retries of infrastructure calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

T = TypeVar("T")


async def at_once(call: Callable[[T], Awaitable[object]], items: Iterable[T], limit: int) -> None:
    """Await `call(item)` for each item, `limit` at a time; on the first error cancel the rest, raise it."""
    gate = asyncio.Semaphore(limit)

    async def bounded(item: T) -> None:
        async with gate:
            await call(item)

    tasks = [asyncio.ensure_future(bounded(item)) for item in items]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def short_retries(kind: type[Exception], call: Callable[[], Awaitable[T]], wait: float) -> T:
    """`call()`, tried up to three times while it raises `kind`: a brief outage of the database or broker."""
    try:
        return await call()
    except kind:
        # Building tenacity's machinery costs more per message than the rest of this wrapper: only
        # a call that failed pays for it.
        await asyncio.sleep(wait)
    async for attempt in AsyncRetrying(
        stop=stop_after_attempt(2),
        wait=wait_exponential(multiplier=wait * 2, max=2),
        retry=retry_if_exception_type(kind),
        reraise=True,
    ):
        with attempt:
            return await call()
    raise AssertionError("unreachable: tenacity reraises the last failure")
