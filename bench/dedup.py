"""Dedup memory: Redis bytes per URL of the crawler's seen store, over 1,000,000 URLs.

python -m bench.dedup [--urls N]

Claims and confirms N distinct fingerprints through crawler.dedup.SeenStore under a fresh key
prefix, as routing does, then reads MEMORY USAGE of the key (exact for the key) and the change in
INFO memory's used_memory (the whole server: other users of a shared Redis add noise to it).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from bench import services
from crawler.dedup import SeenStore
from crawler.names import Names
from crawler.urls import fingerprint

BATCH = 1000
CLAIMANT = fingerprint("http://127.0.0.31:8081/")


@dataclass(frozen=True, slots=True)
class Measured:
    """The store's size after `urls` URLs."""

    urls: int
    key_bytes: int  # MEMORY USAGE of the seen key
    used_memory_delta: int  # INFO memory used_memory, after minus before
    encoding: str
    seconds: float

    def report(self) -> str:
        """Lines for a person."""
        per_key = self.key_bytes / self.urls
        per_server = self.used_memory_delta / self.urls
        return "\n".join(
            [
                f"{self.urls} URLs in the seen store ({self.encoding}), "
                f"claimed and confirmed in {self.seconds:.1f}s",
                f"MEMORY USAGE of the key: {self.key_bytes:>13,} bytes = {per_key:6.1f} bytes/URL",
                f"used_memory grew by:     {self.used_memory_delta:>13,} bytes = {per_server:6.1f} bytes/URL",
            ]
        )


def _url(i: int) -> str:
    return f"http://127.0.0.{31 + i % 4}:8081/p/{i}.html"


async def _used_memory(client: Redis) -> int:
    info = await client.info("memory")
    return int(info["used_memory"])


async def bench(urls: int) -> Measured:
    """Fill a fresh seen store with `urls` fingerprints and measure it."""
    with services.key_prefix("dedupbench") as prefix:
        client = Redis.from_url(services.REDIS_URL)
        try:
            key = Names(prefix).seen_key
            store = SeenStore(client, key)
            before = await _used_memory(client)
            started = time.monotonic()
            for start in range(0, urls, BATCH):
                fps = [fingerprint(_url(i)) for i in range(start, min(start + BATCH, urls))]
                fresh = await store.claim(fps, CLAIMANT)
                if not all(fresh):
                    raise SystemExit(f"bench: {fresh.count(False)} fingerprints already seen: a collision?")
                await store.confirm(fps)
            seconds = time.monotonic() - started
            after = await _used_memory(client)
            key_bytes = await client.memory_usage(key, samples=0)
            encoding = await client.object("encoding", key)
            return Measured(
                urls,
                int(key_bytes or 0),
                after - before,
                encoding.decode() if isinstance(encoding, bytes) else str(encoding),
                seconds,
            )
        finally:
            await client.delete(Names(prefix).seen_key)
            await client.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the dedup bench and print its result."""
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000, help="URLs to store (default %(default)s)")
    args = parser.parse_args(argv)
    print(asyncio.run(bench(args.urls)).report())


if __name__ == "__main__":
    main()
