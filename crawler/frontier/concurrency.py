"""Concurrency helpers: bounded fan-out of broker round trips, reads at once that fail as one, brief
retries of infrastructure calls."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar, overload

from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")


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


@overload
async def together(a: Awaitable[A], b: Awaitable[B], /) -> tuple[A, B]: ...
@overload
async def together(a: Awaitable[A], b: Awaitable[B], c: Awaitable[C], /) -> tuple[A, B, C]: ...
@overload
async def together(
    a: Awaitable[A], b: Awaitable[B], c: Awaitable[C], d: Awaitable[D], /
) -> tuple[A, B, C, D]: ...
async def together(*reads: Awaitable[Any]) -> tuple[Any, ...]:
    """Await `reads` at once, as asyncio.gather; but on the first error the others are cancelled and
    awaited before it is raised, so none runs on past the connections its caller then closes."""

    async def awaited(read: Awaitable[Any]) -> Any:
        return await read

    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(awaited(read)) for read in reads]
    except ExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return tuple(task.result() for task in tasks)


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
