"""The fleet's recent fetch answers per domain: each worker adds what its fetches came to (from its
metrics, counted once there) to a Redis tally per ANSWERS_STEP seconds, and the console reads the last
minutes of it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from crawler.monitor import readings
from crawler.monitor.metrics import Metrics
from crawler.names import ANSWERS_KEPT, ANSWERS_STEP, Names

ANSWER_KINDS = ("ok", "failed", "4xx", "5xx", "network", *readings.REFUSALS)
WINDOW = 300  # seconds of answers a domain's view sums
MINUTE_STEPS = 60 // ANSWERS_STEP
_TAB = "\t"  # cannot occur in a domain name, so a field splits back into (domain, kind) unambiguously


class AnswerLog:
    """What one worker has added to the fleet's tally, so that each write adds only what is new."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._added: readings.Tally = {}

    def add_to(self, pipe: Any, names: Names, now: float | None = None) -> readings.Tally:
        """Queue on `pipe` what is new since the last `added`; the counts to pass to it once written."""
        counts = readings.answers(self._metrics)
        key = names.answers_key(_step(time.time() if now is None else now) * ANSWERS_STEP)
        queued = False
        for domain, kinds in counts.items():
            before = self._added.get(domain, {})
            for kind, n in kinds.items():
                new = int(n - before.get(kind, 0))
                if new > 0 and domain:
                    pipe.hincrby(key, f"{domain}{_TAB}{kind}", new)
                    queued = True
        if queued:
            pipe.expire(key, ANSWERS_KEPT)
        return counts

    def added(self, counts: readings.Tally) -> None:
        """The counts `add_to` returned were written (a failed write leaves them to the next one)."""
        self._added = counts


@dataclass(frozen=True, slots=True)
class Recent:
    """A domain's answers over the last WINDOW seconds, and its refusals (403 and 429 together) in
    the minute before last and in the last minute."""

    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ANSWER_KINDS, 0))
    refusals: tuple[int, int] = (0, 0)


async def recent(redis: Redis, names: Names, now: float | None = None) -> dict[str, Recent]:
    """Every domain's answers of the last WINDOW seconds, from the fleet's tally."""
    last = _step(time.time() if now is None else now)
    steps = list(range(last - WINDOW // ANSWERS_STEP + 1, last + 1))
    async with redis.pipeline(transaction=False) as pipe:
        for step in steps:
            pipe.hgetall(names.answers_key(step * ANSWERS_STEP))
        tallies: list[dict[Any, Any]] = await pipe.execute()
    counts: dict[str, dict[str, int]] = {}
    refused: dict[str, list[int]] = {}
    for step, tally in zip(steps, tallies, strict=True):
        age = last - step  # in steps: 0 is the step under way
        for raw, n in tally.items():
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
            domain, _, kind = name.partition(_TAB)
            if kind not in ANSWER_KINDS:
                continue
            into = counts.setdefault(domain, dict.fromkeys(ANSWER_KINDS, 0))
            into[kind] += int(n)
            if kind in readings.REFUSALS and age < 2 * MINUTE_STEPS:
                minutes = refused.setdefault(domain, [0, 0])
                minutes[0 if age >= MINUTE_STEPS else 1] += int(n)
    return {d: Recent(c, (refused.get(d, [0, 0])[0], refused.get(d, [0, 0])[1])) for d, c in counts.items()}


def _step(now: float) -> int:
    return int(now // ANSWERS_STEP)
