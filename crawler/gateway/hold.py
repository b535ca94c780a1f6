"""One request's claim on its key (budget, concurrency) and on the exit reserved for it, from its
first reservation to its final settle: what it is charged, and when."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from crawler.gateway.answer import BUDGET, CONCURRENCY, Refusal
from crawler.gateway.ask import Ask
from crawler.gateway.metrics import GatewayMetrics
from crawler.gateway.pool import Attempted, Pool, Settled
from crawler.gateway.proxies import ApiKey, Exit
from crawler.gateway.relay import Reply


class Hold:
    """A request's place in its key's concurrency and its reserved exit, each released by a settle."""

    def __init__(self, pool: Pool, key: ApiKey, price: float, domain: str, metrics: GatewayMetrics) -> None:
        self._pool = pool
        self._key = key
        self.price = price
        self._domain = domain
        self._metrics = metrics
        self._rid = pool.request_id()
        self._admitted = False  # counted against the key's concurrency until a final settle
        self._exit: Exit | None = None  # reserved and not yet settled

    async def reserve(
        self, exits: list[Exit], ask: Ask, deadline: float, max_wait: float
    ) -> Exit | Refusal | None:
        """An exit reserved for the request, waiting (within the deadline and max_wait) for one to
        free up; None if none did; on the first call, the key's 402 or 429 if it is refused."""
        give_up = min(deadline, time.monotonic() + max_wait)
        admit = not self._admitted
        key = self._key
        while True:
            got = await self._pool.reserve(
                key, self._rid, self.price, exits, ask.host, ask.session, ask.timeout, admit=admit
            )
            if got.refused == "budget":
                return Refusal(402, BUDGET, f"budget of key {key.id} is spent ({key.budget:g} credits)")
            if got.refused == "concurrency":
                return Refusal(
                    429, CONCURRENCY, f"key {key.id} is at its concurrency limit ({key.max_concurrency})"
                )
            self._admitted = True
            if got.exit is not None:
                self._exit = got.exit
                return got.exit
            admit = False
            if got.wait < 0:
                return None  # every candidate is dead
            pause = min(got.wait, give_up - time.monotonic())
            if pause <= 0:
                return None
            await asyncio.sleep(pause)

    async def release(self, outcome: Attempted, *, final: bool) -> Settled:
        """Settle the reserved exit with `outcome`; `final` also uncounts the request from its key."""
        exit, self._exit = self._exit, None
        settled = await self._pool.settle(
            self._key, self._rid, exit, self._domain, outcome, self.price, final=final
        )
        self._admitted = self._admitted and not final
        return settled

    async def charge(self) -> None:
        """The answer counted: settle it, charged."""
        await self.release("answered", final=True)
        self._metrics.credits.labels(self._key.id).inc(self.price)

    async def close(self) -> None:
        """Settle what is still held, uncharged (idempotent)."""
        if self._admitted or self._exit is not None:
            await self.release("none", final=True)


class Streamed:
    """A body's rest streaming from its exit: the request keeps its hold until the stream ends, and
    is charged only if the body was passed on whole."""

    def __init__(self, reply: Reply, hold: Hold, deadline: float) -> None:
        assert reply.rest is not None
        self._reply = reply
        self._rest = reply.rest
        self._hold = hold
        self._done = False
        self.deadline = deadline

    def __aiter__(self) -> AsyncIterator[bytes]:
        """The body's remaining pieces."""
        return self._rest

    async def finish(self, whole: bool) -> None:
        """Let go of the exit's connection and settle: charged if `whole`."""
        if self._done:
            return
        self._done = True
        try:
            await self._reply.aclose()
        finally:
            await (self._hold.charge() if whole else self._hold.close())
