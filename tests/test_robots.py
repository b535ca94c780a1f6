"""robots.txt shared through Redis: one worker fetches it under a lock only its holder can release."""

from __future__ import annotations

import asyncio

import httpx
from redis.asyncio import Redis

from crawler.config import Rules
from crawler.fetch.fetcher import Response
from crawler.fetch.robots import Robots
from crawler.names import Names
from tests.wait import until

ORIGIN = "http://robots.test"


class Gate:
    """A fetcher whose robots.txt arrives only when the test opens the gate."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.started = asyncio.Event()
        self.open = asyncio.Event()
        self.fetches = 0

    async def fetch(self, url: str, rules: Rules, *, html_only: bool = True) -> Response:
        self.fetches += 1
        self.started.set()
        await self.open.wait()
        return Response(url, url, 200, httpx.Headers({"content-type": "text/plain"}), self.body)

    async def aclose(self) -> None:
        """Nothing to release."""


async def _cleared(url: str) -> None:
    pass


async def _check(robots: Robots, path: str) -> bool:
    verdict = await robots.check(f"{ORIGIN}{path}", Rules(), _cleared)
    return verdict.allowed


async def test_a_holder_whose_lock_expired_leaves_the_next_holders_lock(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    lock_key = names.robots_lock_key(ORIGIN)
    slow, fast = Gate(b"User-agent: *\nDisallow: /slow\n"), Gate(b"User-agent: *\nDisallow: /fast\n")
    first = asyncio.create_task(_check(Robots(redis, names, slow, "crawler", lock_ttl=0.3), "/slow"))
    await slow.started.wait()
    await until(lambda: redis.exists(lock_key), lambda n: n == 0, within=10, what="first lock expires")

    second = asyncio.create_task(_check(Robots(redis, names, fast, "crawler"), "/fast"))
    await fast.started.wait()
    successor = await redis.get(lock_key)
    assert successor is not None

    slow.open.set()
    assert await first is False
    assert await redis.get(lock_key) == successor, "the expired holder released its successor's lock"

    fast.open.set()
    assert await second is False
    assert await redis.exists(lock_key) == 0  # the successor released its own
    assert (slow.fetches, fast.fetches) == (1, 1)


async def test_waiters_take_over_from_a_holder_that_died(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    await redis.set(names.robots_lock_key(ORIGIN), b"a dead worker's token", px=300)
    gate = Gate(b"User-agent: *\nDisallow: /private\n")
    gate.open.set()
    robots = Robots(redis, names, gate, "crawler")
    verdicts = await asyncio.gather(_check(robots, "/private"), _check(robots, "/public"))
    assert list(verdicts) == [False, True]
    assert gate.fetches == 1  # the second waiter read what the first fetched
