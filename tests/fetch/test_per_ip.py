"""Politeness per IP address: every host on one address shares its bucket, fleet-wide, in the same
round trip as the host's own token; it holds across a worker SIGKILL and a lost bucket."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from redis.asyncio import Redis

from bench.crash import max_in_window
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.names import Names
from tests.support.redis_server import PrivateRedis
from tests.support.services import REDIS_URL
from tests.support.wait import until

ADDRESS = "127.0.0.9"
PER_IP = Budget(rate=20, burst=2, recovery=10)
HOST = Budget(rate=100, burst=5, recovery=10)  # each host alone could go five times faster


def within_ip_budget(times: list[float]) -> None:
    for window in (0.5, 1.0, 2.0):
        assert max_in_window(times, window) <= PER_IP.rate * window + PER_IP.burst + 1, window


async def test_hosts_on_one_address_share_its_budget(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    granted: list[float] = []

    async def taker(host: str) -> None:
        for _ in range(10):
            await limiter.acquire(host, lambda: HOST, ip=(ADDRESS, PER_IP))
            granted.append(time.monotonic())

    await asyncio.gather(*(taker(f"h{i}.test") for i in range(4)))
    assert len(granted) == 40
    within_ip_budget(granted)
    assert max(granted) - min(granted) >= (40 - PER_IP.burst) / PER_IP.rate * 0.9


async def test_a_host_keeps_its_own_budget_under_a_larger_ip_budget(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    slow = Budget(rate=10, burst=1, recovery=10)
    granted: list[float] = []
    for _ in range(11):
        await limiter.acquire(
            "slow.test", lambda: slow, ip=(ADDRESS, Budget(rate=1000, burst=50, recovery=10))
        )
        granted.append(time.monotonic())
    assert max(granted) - min(granted) >= 10 / 10 * 0.9


async def test_a_request_held_by_its_address_counts_for_its_host_when_it_goes(
    redis: Redis, prefix: str
) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    host, ip = Budget(rate=2, burst=1, recovery=10), (ADDRESS, Budget(rate=4, burst=1, recovery=10))
    await limiter.acquire("b.test", lambda: host, ip=ip)  # takes the address's token
    await limiter.acquire("a.test", lambda: host, ip=ip)  # a.test's token is due now; it goes 0.25 s on
    first = time.monotonic()
    await limiter.acquire("a.test", lambda: host, ip=ip)
    assert (
        time.monotonic() - first >= 0.45
    )  # a whole interval after a.test's first went, not after it was due


async def test_a_request_that_went_late_counts_when_it_went(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    host, ip = Budget(rate=2, burst=1, recovery=10), (ADDRESS, Budget(rate=2, burst=1, recovery=10))
    await limiter.acquire("a.test", lambda: host, ip=ip)
    granted = time.monotonic()
    await limiter.went_late("a.test", host, 0.3, ip=ip)  # its connection took 0.3 s
    done: dict[str, float] = {}

    async def next_one(name: str, share: tuple[str, Budget] | None) -> None:
        await limiter.acquire(name, lambda: host, ip=share)
        done[name] = time.monotonic() - granted

    # a.test's own next token, and the address's for another host: 0.5 s after it went, not after it was due
    await asyncio.gather(next_one("a.test", None), next_one("b.test", ip))
    assert done["a.test"] >= 0.75 and done["b.test"] >= 0.75, done


async def test_other_addresses_do_not_share_it(redis: Redis, prefix: str) -> None:
    limiter = RateLimiter(redis, Names(prefix))
    started = time.monotonic()
    for i in range(10):  # ten hosts on ten addresses, each one token of a burst of 1
        await limiter.acquire(
            f"h{i}.test", lambda: HOST, ip=(f"127.0.1.{i}", Budget(rate=1, burst=1, recovery=10))
        )
    assert time.monotonic() - started < 0.5


async def test_an_ip_bucket_lost_while_takers_hold_reservations_grants_no_more_than_its_budget(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    limiter = RateLimiter(redis, names)
    granted: list[float] = []

    async def taker(host: str) -> None:
        for _ in range(15):
            await limiter.acquire(host, lambda: HOST, ip=(ADDRESS, PER_IP))
            granted.append(time.monotonic())

    async def lose() -> None:
        await until(lambda: len(granted) >= 20, every=0.01)
        keys = [names.ip_bucket_key(ADDRESS), *(names.bucket_key(f"h{i}.test") for i in range(4))]
        await redis.delete(*keys)  # what a flush or an empty restart does to them

    await asyncio.gather(lose(), *(taker(f"h{i}.test") for i in range(4)))
    assert len(granted) == 60
    within_ip_budget(granted)


# A worker of its own: takes tokens for its host on ADDRESS and prints when each was granted.
TAKER = """
import asyncio, sys, time
from redis.asyncio import Redis
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.names import Names

async def main() -> None:
    limiter = RateLimiter(Redis.from_url(sys.argv[1]), Names(sys.argv[2]))
    host, ip = Budget(100, 5, 10), (sys.argv[3], Budget(float(sys.argv[4]), int(sys.argv[5]), 10))
    async def one() -> None:
        while True:
            await limiter.acquire("killed.test", lambda: host, ip=ip)
            print(time.time(), flush=True)
    await asyncio.gather(*(one() for _ in range(4)))

asyncio.run(main())
"""


async def test_the_ip_budget_holds_across_a_worker_killed_mid_crawl(redis: Redis, prefix: str) -> None:
    args = [REDIS_URL, prefix, ADDRESS, str(PER_IP.rate), str(PER_IP.burst)]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-c", TAKER, *args, stdout=asyncio.subprocess.PIPE, env=env
    )
    assert worker.stdout is not None
    granted: list[float] = []
    limiter = RateLimiter(redis, Names(prefix))

    async def taker() -> None:  # this worker's own requests, to another host on the same address
        for _ in range(10):
            await limiter.acquire("alive.test", lambda: HOST, ip=(ADDRESS, PER_IP))
            granted.append(time.time())

    try:
        for _ in range(15):  # the other worker is granted tokens, and holds reservations ahead
            granted.append(float(await asyncio.wait_for(worker.stdout.readline(), 30)))
        survivors = [asyncio.create_task(taker()) for _ in range(3)]
        await until(lambda: len(granted) >= 20, every=0.01)
        worker.send_signal(signal.SIGKILL)
        await worker.wait()
        granted += [float(line) for line in (await worker.stdout.read()).split()]
        await asyncio.gather(*survivors)
    finally:
        if worker.returncode is None:
            worker.kill()
            await worker.wait()
    assert len(granted) >= 45
    within_ip_budget(granted)


async def test_a_host_and_its_address_cost_one_round_trip(private_redis: PrivateRedis, prefix: str) -> None:
    redis = Redis.from_url(private_redis.url)
    try:
        limiter = RateLimiter(redis, Names(prefix))
        wide = (ADDRESS, Budget(rate=1000, burst=100, recovery=10))
        await limiter.acquire("warm.test", lambda: HOST, ip=wide)  # loads the script
        await redis.config_resetstat()
        for i in range(20):
            await limiter.acquire(f"h{i % 4}.test", lambda: HOST, ip=wide)
        stats = await redis.info("commandstats")
    finally:
        await redis.aclose()
    calls = {
        name: s["calls"]
        for name, s in stats.items()
        if name not in ("cmdstat_info", "cmdstat_config|resetstat")
    }
    assert calls.pop("cmdstat_evalsha") == 20  # one round trip each
    # Every other command ran inside those scripts: both buckets, each read and written.
    assert calls == {"cmdstat_time": 40, "cmdstat_hmget": 40, "cmdstat_hset": 40, "cmdstat_pexpire": 40}
