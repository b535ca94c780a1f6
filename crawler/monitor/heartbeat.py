"""Worker liveness: each consumer renews a Redis key with a TTL; a worker that stops renewing is gone.

A worker's record is also kept in a hash without a TTL, so `crawler status` can list the workers that
went silent (killed, frozen, cut off) and not only the live ones. A worker that stops cleanly removes
both.
"""

from __future__ import annotations

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

from crawler.monitor import readings
from crawler.monitor.answers import AnswerLog
from crawler.monitor.liveness import BEATS_PER_TTL, Board, Liveness, renew
from crawler.monitor.metrics import Metrics
from crawler.names import HEARTBEAT_TTL, Names

log = logging.getLogger(__name__)


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
    # Its finished WARC files not yet in object storage, and its last upload's error ("" if none).
    archive_waiting: int = 0
    archive_error: str = ""


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    """A worker as `crawler status` shows it: "live", "late" (missed beats) or "gone" (key expired)."""

    state: Liveness
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
        self.answers = AnswerLog(metrics)
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
            archive_waiting=readings.archive_waiting(self.metrics),
            archive_error=self.metrics.archive_upload_error,
        )

    async def beat(self) -> None:
        """Write one heartbeat: the key (with its TTL), the record in the hash of workers, and what
        its fetches answered since the last beat into the fleet's tally."""
        record = self.record()
        async with self.redis.pipeline(transaction=True) as pipe:
            board(self.names).write(pipe, self.id, json.dumps(asdict(record)), self.ttl)
            answered = self.answers.add_to(pipe, self.names, record.beat)
            await pipe.execute()
        self.answers.added(answered)
        self.metrics.beat(record.beat)

    async def remove(self) -> None:
        """Forget this worker: it stopped on purpose, so it is not flagged as gone. Its last answers
        go to the fleet's tally."""
        async with self.redis.pipeline(transaction=True) as pipe:
            board(self.names).remove(pipe, self.id)
            answered = self.answers.add_to(pipe, self.names)
            await pipe.execute()
        self.answers.added(answered)

    async def run(self) -> None:
        """Beat until cancelled; then remove the heartbeat. A Redis hiccup skips a beat, no more."""

        async def tidy() -> None:
            await board(self.names).forget_long_gone(self.redis, _parse)

        await renew(self.beat, self.remove, tidy, self.interval, self.ttl, "heartbeat")


def board(names: Names) -> Board:
    """Where workers' heartbeats are kept."""
    return Board(names.worker_key, names.workers_key)


async def workers(redis: Redis, names: Names) -> list[WorkerStatus]:
    """Every worker with a record: live ones first, then late, then gone; by host and pid within."""
    return [WorkerStatus(state, age, r) for state, age, r in await board(names).read(redis, _parse)]


def _parse(value: bytes | str) -> WorkerRecord | None:
    try:
        data: dict[str, Any] = json.loads(value)
        return WorkerRecord(**data)
    except (ValueError, TypeError):
        log.warning("ignoring an unreadable worker record: %r", value[:200])
        return None
