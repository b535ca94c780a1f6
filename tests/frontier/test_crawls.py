"""A crawl's state in Redis: its counts and its pages over time, frozen once it is cancelled."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from crawler.frontier.crawls import SERIES_STEPS, CrawlState
from crawler.names import Names


async def test_pages_stored_go_to_the_series_by_domain_and_a_cancel_freezes_both(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    state = CrawlState(redis, names)
    before = time.time()
    await state.count("c1", {("a.test", "routed"): 5, ("a.test", "ok"): 2, ("a.test", "failed"): 1})
    await state.count("c1", {("b.test", "dead"): 1, ("b.test", "skipped"): 4})
    await state.count("c1", {("a.test", "routed"): 3})  # nothing stored: the series is not touched
    spans = {(s.domain, s.seconds): s for s in await state.series("c1")}
    assert {k: s.pages for k, s in spans.items()} == {("a.test", 10): 3, ("b.test", 10): 1}
    step = SERIES_STEPS[0][1]
    assert before - step <= spans["a.test", 10].start <= time.time()
    assert (await state.counts("c1"))["a.test"]["routed"] == 8

    await state.cancel("c1")
    await state.count("c1", {("a.test", "ok"): 7})
    assert sum(s.pages for s in await state.series("c1")) == 4


async def test_an_older_crawl_keeps_its_series_in_longer_steps(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    state = CrawlState(redis, names)
    for age, step in SERIES_STEPS:
        await redis.hset(names.crawl_series_key("c2"), "start", int(time.time()) - age)
        await state.count("c2", {("a.test", "ok"): 1})
        assert any(s.seconds == step for s in await state.series("c2")), (age, step)
    assert sum(s.pages for s in await state.series("c2")) == len(SERIES_STEPS)
