"""Reads at once (`together`): their answers in order, or the first error once the others have ended."""

from __future__ import annotations

import asyncio

import pytest

from crawler.errors import ServiceUnavailable
from crawler.frontier.concurrency import together


async def test_together_answers_in_order() -> None:
    async def late(value: int) -> int:
        await asyncio.sleep(0)
        return value

    assert await together(late(1), asyncio.to_thread(str, 2), late(3)) == (1, "2", 3)


async def test_a_failed_read_is_raised_alone_once_the_others_are_cancelled() -> None:
    started, released = asyncio.Event(), asyncio.Event()
    ended: list[str] = []

    async def slow() -> None:
        started.set()
        try:
            await released.wait()
        finally:
            ended.append("slow")

    async def failing() -> None:
        await started.wait()
        raise ServiceUnavailable("database unreachable")

    with pytest.raises(ServiceUnavailable, match="database unreachable"):
        await together(slow(), failing())
    assert ended == ["slow"]  # gather would have left it waiting past the caller's connections
