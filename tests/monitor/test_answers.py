"""The fleet's tally of fetch answers: each worker adds only what is new, by its heartbeat; the console
reads the last five minutes, and the refusals of the last two."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from crawler.monitor.answers import ANSWERS_STEP, WINDOW, AnswerLog, recent
from crawler.monitor.heartbeat import Heartbeat
from crawler.monitor.metrics import Metrics
from crawler.names import Names


def _fetches(metrics: Metrics, domain: str, *statuses: int | None) -> None:
    for status in statuses:
        metrics.observe_fetch(domain, 0.01, status)


async def test_each_beat_adds_only_what_is_new_and_a_failed_write_is_added_later(
    redis: Redis, prefix: str
) -> None:
    names, metrics = Names(prefix), Metrics(process=False)
    beat = Heartbeat(redis, names, lambda: ["a.test"], metrics, role="test")
    _fetches(metrics, "a.test", 429, 429, 403, 404, 503)
    metrics.observe_outcome("a.test", "ok", 200)
    metrics.observe_outcome("a.test", "failed", 404)
    metrics.observe_error("a.test", "internal")  # not a fetch's answer: not in the tally
    await beat.beat()
    await beat.beat()  # nothing new: nothing added twice
    seen = (await recent(redis, names))["a.test"]
    assert seen.counts == {"ok": 1, "failed": 1, "4xx": 4, "5xx": 1, "network": 0, "403": 1, "429": 2}
    assert seen.refusals == (0, 3)

    log = AnswerLog(metrics)
    async with redis.pipeline(transaction=True) as pipe:
        log.add_to(pipe, names)  # queued but never written: `added` is not called
    async with redis.pipeline(transaction=True) as pipe:
        log.added(log.add_to(pipe, names))
        await pipe.execute()
    assert (await recent(redis, names))["a.test"].counts["4xx"] == 8  # a second worker's own

    metrics.observe_fetch("a.test", 0.01, None, error=None)  # no answer, no error: nothing
    await beat.remove()  # a clean stop adds its last answers
    assert (await recent(redis, names))["a.test"].counts["ok"] == 2


async def test_the_window_keeps_five_minutes_and_refusals_compare_the_last_two(
    redis: Redis, prefix: str
) -> None:
    names, now = Names(prefix), time.time()
    step = int(now // ANSWERS_STEP)

    async def add(age_seconds: int, kind: str, n: int) -> None:
        key = names.answers_key((step - age_seconds // ANSWERS_STEP) * ANSWERS_STEP)
        await redis.hincrby(key, f"a.test\t{kind}", n)

    await add(0, "429", 4)
    await add(30, "403", 1)
    await add(70, "429", 2)  # the minute before last
    await add(WINDOW - ANSWERS_STEP, "5xx", 5)  # the oldest step of the window
    await add(WINDOW, "5xx", 100)  # out of it
    await redis.hset(names.answers_key(step * ANSWERS_STEP), "a.test\tunknown", 9)
    seen = (await recent(redis, names, now))["a.test"]
    assert seen.counts["5xx"] == 5 and seen.counts["4xx"] == 0
    assert seen.counts["429"] == 6 and seen.counts["403"] == 1
    assert seen.refusals == (2, 5)
