"""Worker liveness: each consumer renews a Redis key with a TTL; a worker that stops renewing is gone.

A worker's record is also kept in a hash without a TTL, so `crawler status` can list the workers that
went silent (killed, frozen, cut off) and not only the live ones. A worker that stops cleanly removes
both.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from crawler.monitor import readings
from crawler.monitor.metrics import Metrics
from crawler.names import GONE_KEPT, HEARTBEAT_TTL, Names

log = logging.getLogger(__name__)

BEATS_PER_TTL = 3  # beats a worker may miss, less one, before its key expires


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """What a worker says about itself in each heartbeat."""

    id: str
    host: str
    pid: int
    role: str
    domains: list[str]
    pages: int
    started: str  # ISO 8601, UTC
    beat: float  # Unix time of this beat, by the worker's clock
    ttl: float


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A worker as `crawler status` shows it: "live", "late" (missed beats) or "gone" (key expired)."""

    state: str
    age: float | None  # seconds since its last beat, by Redis' clock; None once gone
    worker: WorkerRecord


class Heartbeat:
    """Renews this worker's heartbeat every ttl/3 seconds until cancelled, then removes it.

    `domains` is asked at each beat: a consumer may take on new domains while it runs.
    """

    def __init__(
        self,
        redis: Redis,
        names: Names,
        domains: Callable[[], Sequence[str]],
        metrics: Metrics,
        *,
        role: str,
        ttl: float = HEARTBEAT_TTL,
    ) -> None:
        if ttl <= 0:
            raise ValueError("heartbeat ttl must be positive")
        self.redis = redis
        self.names = names
        self.domains = domains
        self.metrics = metrics
        self.role = role
        self.ttl = ttl
        self.host = socket.gethostname()
        self.pid = os.getpid()
        # The random part keeps two consumers of one process (or a reused pid) apart.
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(3)}"
        self.started = datetime.now(UTC).isoformat(timespec="seconds")

    @property
    def interval(self) -> float:
        """Seconds between beats."""
        return self.ttl / BEATS_PER_TTL

    def record(self) -> WorkerRecord:
        """This worker's record as of now."""
        return WorkerRecord(
            id=self.id,
            host=self.host,
            pid=self.pid,
            role=self.role,
            domains=list(self.domains()),
            pages=readings.pages_done(self.metrics),
            started=self.started,
            beat=time.time(),
            ttl=self.ttl,
        )

    async def beat(self) -> None:
        """Write one heartbeat: the key (with its TTL) and the record in the hash of workers."""
        record = self.record()
        value = json.dumps(asdict(record))
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self.names.worker_key(self.id), value, px=max(1, round(self.ttl * 1000)))
            pipe.hset(self.names.workers_key, self.id, value)
            await pipe.execute()
        self.metrics.beat(record.beat)

    async def remove(self) -> None:
        """Forget this worker: it stopped on purpose, so it is not flagged as gone."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(self.names.worker_key(self.id))
            pipe.hdel(self.names.workers_key, self.id)
            await pipe.execute()

    async def run(self) -> None:
        """Beat until cancelled; then remove the heartbeat. A Redis hiccup skips a beat, no more."""
        try:
            with contextlib.suppress(RedisError, OSError):  # housekeeping; skipped if Redis is away
                await self._forget_long_gone()
            while True:
                try:
                    await self.beat()
                except (RedisError, OSError) as exc:
                    log.warning("heartbeat not written (%s); trying again in %.1fs", exc, self.interval)
                await asyncio.sleep(self.interval)
        finally:
            try:
                await asyncio.shield(self.remove())
            except (RedisError, OSError) as exc:
                log.warning("heartbeat not removed (%s); it expires in %.0fs", exc, self.ttl)

    async def _forget_long_gone(self) -> None:
        with_ttl = await workers(self.redis, self.names)
        cutoff = time.time() - GONE_KEPT
        stale = [w.worker.id for w in with_ttl if w.state == "gone" and w.worker.beat < cutoff]
        if stale:
            await self.redis.hdel(self.names.workers_key, *stale)


async def workers(redis: Redis, names: Names) -> list[WorkerStatus]:
    """Every worker with a record: live ones first, then late, then gone; by host and pid within."""
    records: dict[Any, Any] = await redis.hgetall(names.workers_key)
    parsed = [r for r in (_parse(v) for v in records.values()) if r is not None]
    async with redis.pipeline(transaction=False) as pipe:
        for record in parsed:
            pipe.pttl(names.worker_key(record.id))
        remaining: list[int] = await pipe.execute()
    out = []
    for record, pttl in zip(parsed, remaining, strict=True):
        if pttl < 0:  # -2: expired; -1 (no TTL) cannot happen for a key we wrote
            out.append(WorkerStatus("gone", None, record))
            continue
        age = max(0.0, record.ttl - pttl / 1000)
        late = age > 2 * record.ttl / BEATS_PER_TTL
        out.append(WorkerStatus("late" if late else "live", round(age, 3), record))
    order = {"live": 0, "late": 1, "gone": 2}
    return sorted(out, key=lambda w: (order[w.state], w.worker.host, w.worker.pid, w.worker.id))


def _parse(value: bytes | str) -> WorkerRecord | None:
    try:
        data: dict[str, Any] = json.loads(value)
        return WorkerRecord(**data)
    except (ValueError, TypeError):
        log.warning("ignoring an unreadable worker record: %r", value[:200])
        return None
