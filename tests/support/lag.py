"""How late the test's own event loop ran: the jitter in timestamps a test site takes in that loop."""

from __future__ import annotations

import asyncio
import time
from types import TracebackType

TICK = 0.01


class LoopLag:
    """While entered, records the longest delay past a wake-up the running loop showed.

    A site logging arrival times in this loop can timestamp a request late by up to that much, so
    spacing read from its log is exact only to within `worst`.
    """

    def __init__(self) -> None:
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopLag:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _watch(self) -> None:
        while True:
            asked = time.monotonic()
            await asyncio.sleep(TICK)
            self.worst = max(self.worst, time.monotonic() - asked - TICK)
