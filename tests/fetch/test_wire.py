"""A request's pacing hears from the transport as it goes on the wire, and holds it there if need be:
a request that went late pushes its host's and its address's next token back by as much, and one
whose lateness would bring it too close to a request granted meanwhile waits for its turn after it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from crawler.config import parse_config
from crawler.fetch.aio import AiohttpFetcher
from crawler.fetch.fetcher import BoundedFetcher, HttpFetcher
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.fetch.wire import paced
from crawler.names import Names
from demo.site import Site, free_port, page, serve

HOST = Budget(rate=2, burst=1, recovery=10)
PER_IP = ("127.0.0.9", Budget(rate=2, burst=1, recovery=10))
LATE = 0.3
HELD = 0.2


@pytest.mark.parametrize("make", [HttpFetcher, AiohttpFetcher], ids=["httpx", "aiohttp"])
async def test_each_transport_tells_the_pacing_once_and_waits_on_it_before_the_request_goes(
    make: type[HttpFetcher] | type[AiohttpFetcher],
) -> None:
    ip = "127.0.0.23"
    site = Site("a.test", ip, free_port(ip), {"/": page("hi", [])})
    loaded = parse_config(
        f"allow_private_networks: true\nresolve: {{a.test: {ip}}}\ndomains: {{a.test: {{}}}}\n"
    )
    fetcher: BoundedFetcher = make(loaded)
    told: list[float] = []

    async def on_wire() -> None:
        told.append(time.monotonic())
        await asyncio.sleep(HELD)

    try:
        with serve(site):
            before = time.monotonic()
            with paced(on_wire):
                await fetcher.fetch(site.url(), loaded.rules_for("a.test"))
                await fetcher.fetch(site.url(), loaded.rules_for("a.test"))  # not the paced one
            await fetcher.fetch(site.url(), loaded.rules_for("a.test"))  # nothing paced it
    finally:
        await fetcher.aclose()
    assert len(told) == 1 and told[0] >= before
    assert len(site.requests) == 3
    assert site.requests[0][0] >= told[0] + HELD  # held until its pacing let it go


async def test_a_request_that_went_late_keeps_the_next_ones_distance(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    first = await limiter.token("a.test", lambda: HOST, ip=PER_IP)
    await asyncio.sleep(LATE)  # a connection, a name, a busy event loop between token and wire
    went = time.monotonic()
    await limiter.sending("a.test", HOST, first, PER_IP)
    second = await limiter.token("a.test", lambda: HOST, ip=PER_IP)
    # Due a whole interval after the first one went, not after it was due.
    assert second.due - went >= 1 / HOST.rate - 0.02, (second.due - went, second.due - first.due)
    # Another host on the address: the address's token is pushed back too.
    third = await limiter.token("b.test", lambda: HOST, ip=PER_IP)
    assert third.due - second.due >= 1 / PER_IP[1].rate - 0.02
    # On time: nothing to tell, nothing moved.
    fourth = await limiter.token("c.test", lambda: HOST)
    await limiter.sending("c.test", HOST, fourth)
    fifth = await limiter.token("c.test", lambda: HOST)
    assert abs((fifth.due - fourth.due) - 1 / HOST.rate) < 0.1


async def test_a_late_request_goes_after_a_request_granted_meanwhile_not_close_to_it(
    redis: Redis, prefix: str
) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    first = await limiter.token("a.test", lambda: HOST, ip=PER_IP)
    # Granted while the first is still connecting: due one interval after the first was due.
    second = asyncio.create_task(limiter.token("a.test", lambda: HOST, ip=PER_IP))
    await asyncio.sleep(LATE)
    await limiter.sending("a.test", HOST, first, PER_IP)
    went = time.monotonic()
    granted = await second
    await limiter.sending("a.test", HOST, granted, PER_IP)  # on time: not held
    # Going as late as it was, 0.2 s before the second's turn, would have been too close to it.
    assert went - granted.due >= 1 / HOST.rate - 0.02, (went - first.due, granted.due - first.due)
    third = await limiter.token("a.test", lambda: HOST, ip=PER_IP)
    assert third.due - went >= 1 / HOST.rate - 0.02


async def test_a_request_still_late_after_being_told_is_counted_as_it_goes(
    redis: Redis, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    told = limiter.went_late

    async def resumed_late(*args: Any, **kwargs: Any) -> float:
        wait = await told(*args, **kwargs)
        await asyncio.sleep(LATE)  # an event loop at full CPU resumes each telling this late
        return wait

    monkeypatch.setattr(limiter, "went_late", resumed_late)
    first = await limiter.token("a.test", lambda: HOST, ip=PER_IP)
    await asyncio.sleep(LATE)
    await limiter.sending("a.test", HOST, first, PER_IP)
    went = time.monotonic()
    await limiter.counted()
    after = await limiter.token("a.test", lambda: HOST, ip=PER_IP)
    # Due a whole interval after it really went, not after the last telling was counted.
    assert after.due - went >= 1 / HOST.rate - 0.02, after.due - went
