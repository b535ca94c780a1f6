"""Burst mode's end: the work is done when no work queue holds a message and nothing is in flight."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from aio_pika.abc import AbstractRobustChannel, AbstractRobustConnection

from crawler.frontier.concurrency import at_once


class DrainPacing(Protocol):
    """How often and how widely the drain check asks the broker (a consumer's Tuning has these)."""

    @property
    def drain_poll(self) -> float: ...
    @property
    def probes(self) -> int: ...
    @property
    def at_once(self) -> int: ...


class Drain:
    """Asks the broker itself whether the work queues are empty, a few probe channels at once."""

    def __init__(
        self,
        connection: AbstractRobustConnection,
        queues: Callable[[], Sequence[str]],
        tiers: Callable[[], int],
        tuning: DrainPacing,
    ) -> None:
        self._connection = connection
        self._queues = queues  # the work queues: domain queues, then the retry tiers
        self._tiers = tiers
        self._tuning = tuning

    async def wait(
        self,
        stop: asyncio.Event,
        idle: Callable[[], bool],
        pause: Callable[[], Awaitable[None]],
        resume: Callable[[], Awaitable[None]],
    ) -> None:
        """Return once the frontier looked empty twice in a row and stayed empty after `pause`."""
        probes: list[AbstractRobustChannel] = []

        async def open_probe(_: int) -> None:
            probes.append(await self._connection.channel(publisher_confirms=False))

        try:
            count = min(self._tuning.probes, len(self._queues()))
            await at_once(open_probe, range(count), self._tuning.at_once)
            quiet = 0
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self._tuning.drain_poll)
                quiet = quiet + 1 if idle() and not await self._pending(probes) else 0
                if quiet < 2:
                    continue
                # Looks done: stop consuming and return anything prefetched, then look again.
                await pause()
                if not await self._pending(probes):
                    return
                quiet = 0
                await resume()
        finally:
            for probe in probes:
                with contextlib.suppress(Exception):
                    await probe.close()

    async def _pending(self, probes: Sequence[AbstractRobustChannel]) -> bool:
        """True if any work queue holds a message."""
        # Retry tiers first: while their messages wait out a delay, they are what is not empty, and
        # the sweep stops at the first queue that is not.
        names = list(self._queues())
        tiers = self._tiers()
        pending = iter([*names[-tiers:], *names[:-tiers]] if tiers else names)
        found = False

        async def probe(channel: AbstractRobustChannel) -> None:
            nonlocal found
            for name in pending:  # shared: each queue is asked once, by whichever probe is free
                if found:
                    return
                # robust=False: a robust channel answers a repeated passive declare from its cache.
                declared = await channel.declare_queue(name, passive=True, robust=False)
                if declared.declaration_result.message_count:
                    found = True

        await at_once(probe, probes, self._tuning.at_once)
        return found
