"""A crawl's state in Redis: its counts and its pages over time, frozen once it is cancelled."""

from __future__ import annotations

import time

import pytest
from redis.asyncio import Redis

from crawler.config import DedupConfig
from crawler.dedup.store import SeenStore
from crawler.frontier.crawls import SERIES_STEPS, CrawlState
from crawler.frontier.urls import fingerprint
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


@pytest.mark.parametrize("mode", ["plain", "compact", "bloom"])
async def test_a_link_that_ends_before_its_page_is_counted_does_not_end_the_crawl(
    redis: Redis, prefix: str, mode: str
) -> None:
    names = Names(prefix)
    state = CrawlState(redis, names)
    seen = SeenStore(redis, names, DedupConfig(mode=mode, capacity=1000)).for_crawl("c1")
    home, link = fingerprint("http://a.test/"), fingerprint("http://a.test/p")
    assert await seen.claim([home], b"seed") == [True]  # the seed, opened as it is claimed
    assert not await state.count("c1", {("a.test", "routed"): 1})
    assert await seen.claim([link], home) == [True]  # the home page's link, published
    # Under load the link's page can end before the home page's outcome (and its links) is counted.
    assert not await state.count("c1", {("a.test", "ok"): 1}), "ended with the home page at work"
    assert await seen.claim([link], home) == [True]  # redelivered, the home page routes it again
    assert await state.count("c1", {("a.test", "ok"): 1, ("a.test", "routed"): 1})


@pytest.mark.parametrize("mode", ["plain", "compact"])
async def test_a_claim_released_after_a_failed_publish_closes_what_it_opened(
    redis: Redis, prefix: str, mode: str
) -> None:
    names = Names(prefix)
    state = CrawlState(redis, names)
    seen = SeenStore(redis, names, DedupConfig(mode=mode, capacity=1000)).for_crawl("c1")
    home, link = fingerprint("http://a.test/"), fingerprint("http://a.test/p")
    await seen.claim([home, link], b"seed")
    await seen.release([link])  # its publish failed: it was never queued
    assert await state.count("c1", {("a.test", "routed"): 1, ("a.test", "ok"): 1})
