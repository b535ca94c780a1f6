"""A crawl's counts with and without its pages-over-time series: Redis' own time per call of the count
script, which every page's outcome runs.

python -m bench.counts [--calls N] [--rounds R]

The script as it was before the series (`COUNTS_ONLY`, the counts alone) and as it is
(`crawler.frontier.crawls`), alternating, each `calls` pipelined calls a round on keys of their own,
timed by Redis' `commandstats` (the server's microseconds, not the client's) and by the clock here
(redis-py's script call included).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from redis.asyncio import Redis

from crawler.frontier import crawls

COUNTS_ONLY = """
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then return 0 end
for i = 2, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
return 1
"""


async def _server_usec(redis: Redis) -> tuple[int, int]:
    stats: dict[str, Any] = (await redis.info("commandstats")).get("cmdstat_evalsha", {})
    return int(stats.get("usec", 0)), int(stats.get("calls", 0))


async def measure(redis_url: str, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """Per way: Redis' microseconds per call, and the median microseconds per call seen here."""
    redis = Redis.from_url(redis_url)
    prefix = f"bench-counts-{uuid.uuid4().hex[:8]}"
    keys = [f"{prefix}:cancelled", f"{prefix}:counts", f"{prefix}:series"]
    ways: dict[str, tuple[Any, list[str], list[str | int]]] = {
        "counts only": (redis.register_script(COUNTS_ONLY), keys[:2], ["c", "a.test ok", 1]),
        "counts + series": (
            redis.register_script(crawls._COUNT),
            keys,
            ["c", 1, "a.test", 1, "a.test ok", 1],
        ),
    }
    server = {name: [0, 0] for name in ways}
    here: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, (script, on, args) in ways.items():
                usec, seen = await _server_usec(redis)
                started = time.perf_counter()
                async with redis.pipeline(transaction=False) as pipe:
                    for _ in range(calls):
                        await script(keys=on, args=args, client=pipe)
                    await pipe.execute()
                here[name].append((time.perf_counter() - started) / calls * 1e6)
                usec_after, seen_after = await _server_usec(redis)
                server[name][0] += usec_after - usec
                server[name][1] += seen_after - seen
    finally:
        await redis.delete(*keys)
        await redis.aclose()
    return {n: (server[n][0] / max(1, server[n][1]), statistics.median(here[n])) for n in ways}


def main() -> None:
    """Entry point of `python -m bench.counts`."""
    parser = argparse.ArgumentParser(prog="python -m bench.counts", description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000, help="pipelined calls a round (default 5000)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of each way, alternating (default 6)")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379", help="the Redis to time")
    args = parser.parse_args()
    found = asyncio.run(measure(args.redis, args.calls, args.rounds))
    print(f"{'way':16}  {'Redis us/call':>13}  {'here us/call':>12}")
    for name, (server, here) in found.items():
        print(f"{name:16}  {server:13.2f}  {here:12.2f}")


if __name__ == "__main__":
    main()
