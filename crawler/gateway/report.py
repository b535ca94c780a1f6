"""The gateway's published state: each replica reports its exits and keys to Redis for the console.

A replica renews a report key with a TTL and copies the report into a hash without one, so a replica
that went silent (killed, frozen, cut off) still shows, as gone. A replica that stops cleanly removes
both. Exits and keys are the fleet's (their state is shared in Redis); each replica reports them as
its own proxies.yaml names them.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal, get_args

from redis.asyncio import Redis

from crawler.gateway.proxies import ProxiesConfig
from crawler.monitor.liveness import BEATS_PER_TTL, Board, Liveness, renew
from crawler.names import GATEWAY_REPORT_TTL, Names

log = logging.getLogger(__name__)


ExitHealth = Literal["healthy", "cooling", "dead"]


@dataclass(frozen=True, slots=True)
class ExitState:
    """One exit as the fleet sees it: dead (until `dead_for` s from now; None: its dead time is over
    but it has not answered since it died, and the next request tries it), cooling down for some
    domains, or healthy."""

    id: str
    state: ExitHealth
    cooling: list[str]  # domains it rests for after a ban, sorted
    dead_for: float | None  # seconds until it is probed or tried again; None: tried by the next request


@dataclass(frozen=True, slots=True)
class KeyState:
    """One API key's credits charged so far, against its budget (None: no budget)."""

    id: str
    credits: float
    budget: float | None


@dataclass(frozen=True, slots=True)
class GatewayReport:
    """What a replica says in each report."""

    id: str
    host: str
    pid: int
    started: str  # ISO 8601, UTC
    beat: float  # Unix time of this report, by the replica's clock
    ttl: float
    exits: list[ExitState]
    keys: list[KeyState]


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    """A replica as the console shows it: "live", "late" (missed two reports) or "gone" (key expired)."""

    state: Liveness
    age: float | None  # seconds since its last report, by Redis' clock; None once gone
    report: GatewayReport


async def read_exits(redis: Redis, names: Names, config: ProxiesConfig) -> list[ExitState]:
    """The state of every exit of `config`, in its order: one SCAN for cooldowns, one pipeline."""
    # A cooldown key's head (up to its domain) names its exit; exit ids hold no ':', so no head is
    # the start of another's, and looking a key up by each head length finds its one exit.
    heads = {names.gw_cool_key(e.id, ""): e.id for e in config.exits}
    lengths = sorted({len(h) for h in heads})
    # One pass over the keyspace for every exit, not one per exit.
    found: list[tuple[str, str, str]] = []  # (exit id, domain, key)
    async for raw in redis.scan_iter(match=names.gw_cool_key("*", "*"), count=1000):
        key = raw.decode() if isinstance(raw, bytes) else str(raw)
        for n in lengths:
            exit_id = heads.get(key[:n])
            if exit_id is not None:
                found.append((exit_id, key[n:], key))
                break
    async with redis.pipeline(transaction=False) as pipe:
        for e in config.exits:
            pipe.pttl(names.gw_dead_key(e.id))
        for e in config.exits:
            pipe.exists(names.gw_deaths_key(e.id))
        for _, _, key in found:
            pipe.pttl(key)
        answers: list[int] = await pipe.execute()
    n = len(config.exits)
    dead_ms, died = answers[:n], answers[n : 2 * n]
    cooling: dict[str, list[str]] = {e.id: [] for e in config.exits}
    for (exit_id, domain, _), pttl in zip(found, answers[2 * n :], strict=True):
        if pttl > 0:  # -2: it expired since the scan
            cooling[exit_id].append(domain)
    out = []
    for e, pttl, streak in zip(config.exits, dead_ms, died, strict=True):
        domains = sorted(cooling[e.id])
        if pttl == -2 and streak:
            # Its dead time ended, not its death: only an answer through it (or a probe) ends that.
            out.append(ExitState(e.id, "dead", domains, None))
        elif pttl == -2:
            out.append(ExitState(e.id, "cooling" if domains else "healthy", domains, None))
        else:  # -1 (no TTL) is never written, but would be dead until revived
            out.append(ExitState(e.id, "dead", domains, pttl / 1000 if pttl >= 0 else None))
    return out


async def read_keys(redis: Redis, names: Names, config: ProxiesConfig) -> list[KeyState]:
    """Every API key of `config`, in its order, with the credits its ledger holds."""
    charged = await redis.mget([names.gw_credits_key(k.id) for k in config.keys])
    return [
        KeyState(k.id, float(value) if value is not None else 0.0, k.budget)
        for k, value in zip(config.keys, charged, strict=True)
    ]


class Reporter:
    """Publishes this replica's report every ttl/3 seconds until cancelled, then removes it.

    `config` is asked at each report: the gateway reloads proxies.yaml while it runs.
    """

    def __init__(
        self,
        redis: Redis,
        names: Names,
        config: Callable[[], ProxiesConfig],
        *,
        ttl: float = GATEWAY_REPORT_TTL,
    ) -> None:
        if ttl <= 0:
            raise ValueError("gateway report ttl must be positive")
        self.redis = redis
        self.names = names
        self.config = config
        self.ttl = ttl
        self.host = socket.gethostname()
        self.pid = os.getpid()
        # The random part keeps two gateways of one process (or a reused pid) apart.
        self.id = f"{self.host}:{self.pid}:{secrets.token_hex(3)}"
        self.started = datetime.now(UTC).isoformat(timespec="seconds")

    @property
    def interval(self) -> float:
        """Seconds between reports: a third of the ttl."""
        return self.ttl / BEATS_PER_TTL

    async def report(self) -> GatewayReport:
        """This replica's report as of now."""
        config = self.config()
        exits = await read_exits(self.redis, self.names, config)
        keys = await read_keys(self.redis, self.names, config)
        return GatewayReport(
            id=self.id,
            host=self.host,
            pid=self.pid,
            started=self.started,
            beat=time.time(),
            ttl=self.ttl,
            exits=exits,
            keys=keys,
        )

    async def publish(self) -> GatewayReport:
        """Write one report: the key (with its TTL) and the report in the hash of replicas."""
        report = await self.report()
        async with self.redis.pipeline(transaction=True) as pipe:
            board(self.names).write(pipe, self.id, json.dumps(asdict(report)), self.ttl)
            await pipe.execute()
        return report

    async def remove(self) -> None:
        """Forget this replica: it stopped on purpose, so it is not flagged as gone."""
        async with self.redis.pipeline(transaction=True) as pipe:
            board(self.names).remove(pipe, self.id)
            await pipe.execute()

    async def run(self) -> None:
        """Report until cancelled; then remove the report. A Redis hiccup skips a report, no more."""

        async def tidy() -> None:
            await board(self.names).forget_long_gone(self.redis, _parse)

        await renew(self.publish, self.remove, tidy, self.interval, self.ttl, "gateway report")


def board(names: Names) -> Board:
    """Where gateway replicas' reports are kept."""
    return Board(names.gateway_key, names.gateways_key)


async def gateways(redis: Redis, names: Names) -> list[GatewayStatus]:
    """Every replica with a report: live ones first, then late, then gone; by host and pid within."""
    return [GatewayStatus(state, age, r) for state, age, r in await board(names).read(redis, _parse)]


def _parse(value: bytes | str) -> GatewayReport | None:
    try:
        data: dict[str, Any] = json.loads(value)
        exits = [ExitState(**e) for e in data.pop("exits")]
        keys = [KeyState(**k) for k in data.pop("keys")]
        if any(e.state not in get_args(ExitHealth) for e in exits):
            raise ValueError("unknown exit state")
        return GatewayReport(**data, exits=exits, keys=keys)
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("ignoring an unreadable gateway report: %r", value[:200])
        return None
