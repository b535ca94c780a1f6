"""Liveness by a record a process renews: a key with a TTL, and a copy in a hash without one, so a
process that went silent (killed, frozen, cut off) still shows, as gone; one that stops cleanly
removes both. Workers' heartbeats and crawl gateways' reports are kept this way."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from redis.asyncio import Redis
from redis.exceptions import RedisError

from crawler.names import GONE_KEPT
from crawler.stopping import still_cancelled

log = logging.getLogger(__name__)

REMOVE_WAIT = 5.0  # seconds a stopping process gives Redis to remove its record

Liveness = Literal["live", "late", "gone"]
BEATS_PER_TTL = 3  # renewals a process may miss, less one, before its key expires
_ORDER = {"live": 0, "late": 1, "gone": 2}


class Record(Protocol):
    """What a renewed record says of its process."""

    @property
    def id(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def pid(self) -> int: ...
    @property
    def beat(self) -> float: ...
    @property
    def ttl(self) -> float: ...


R = TypeVar("R", bound=Record)


@dataclass(frozen=True, slots=True)
class Board:
    """Where the records of one kind of process are kept: a key per process and a hash of them all."""

    key: Callable[[str], str]
    hash: str

    def write(self, pipe: Any, id: str, value: str, ttl: float) -> None:
        """Queue on `pipe` a renewal of `id`'s record."""
        pipe.set(self.key(id), value, px=max(1, round(ttl * 1000)))
        pipe.hset(self.hash, id, value)

    def remove(self, pipe: Any, id: str) -> None:
        """Queue on `pipe` the removal of `id`'s record: it stopped on purpose."""
        pipe.delete(self.key(id))
        pipe.hdel(self.hash, id)

    async def read(
        self, redis: Redis, parse: Callable[[Any], R | None]
    ) -> list[tuple[Liveness, float | None, R]]:
        """Every record with its state and age (seconds since its last renewal, by Redis' clock; None
        once gone): live first, then late (missed two renewals), then gone; by host and pid within."""
        records: dict[Any, Any] = await redis.hgetall(self.hash)
        parsed = [r for r in (parse(v) for v in records.values()) if r is not None]
        async with redis.pipeline(transaction=False) as pipe:
            for record in parsed:
                pipe.pttl(self.key(record.id))
            remaining: list[int] = await pipe.execute()
        out: list[tuple[Liveness, float | None, R]] = []
        for record, pttl in zip(parsed, remaining, strict=True):
            if pttl < 0:  # -2: expired; -1 (no TTL) cannot happen for a key written here
                out.append(("gone", None, record))
                continue
            age = max(0.0, record.ttl - pttl / 1000)
            late = age > 2 * record.ttl / BEATS_PER_TTL
            out.append(("late" if late else "live", round(age, 3), record))
        return sorted(out, key=lambda s: (_ORDER[s[0]], s[2].host, s[2].pid, s[2].id))

    async def forget_long_gone(self, redis: Redis, parse: Callable[[Any], R | None]) -> None:
        """Drop the records of processes gone for more than GONE_KEPT."""
        cutoff = time.time() - GONE_KEPT
        found = await self.read(redis, parse)
        stale = [r.id for state, _, r in found if state == "gone" and r.beat < cutoff]
        if stale:
            await redis.hdel(self.hash, *stale)


async def renew(
    write: Callable[[], Awaitable[object]],
    remove: Callable[[], Awaitable[None]],
    tidy: Callable[[], Awaitable[None]],
    interval: float,
    ttl: float,
    what: str,
) -> None:
    """`tidy` once, then `write` every `interval` seconds until cancelled, then `remove`. A Redis
    hiccup skips a renewal, no more."""
    try:
        with contextlib.suppress(RedisError, OSError):  # housekeeping; skipped if Redis is away
            await tidy()
        while True:
            try:
                await write()
            except (RedisError, OSError) as exc:
                log.warning("%s not written (%s); trying again in %.1fs", what, exc, interval)
            still_cancelled()
            await asyncio.sleep(interval)
    finally:
        # Bounded: a stop must not hang on Redis (a command cut short by the cancellation can leave
        # the next one waiting); a record not removed expires all the same.
        try:
            await asyncio.wait_for(asyncio.shield(remove()), REMOVE_WAIT)
        except (RedisError, OSError, TimeoutError) as exc:
            log.warning("%s not removed (%r); it expires in %.0fs", what, exc, ttl)
