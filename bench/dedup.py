"""Dedup memory: Redis bytes per URL of each dedup mode, and the Bloom mode's false positives.

python -m bench.dedup [--urls N] [--mode plain,compact,bloom] [--capacity C] [--batch B]

For each mode, under a fresh key prefix: claims and confirms N distinct fingerprints through
crawler.dedup.SeenStore in batches of B (a page's links, as routing does), then reads MEMORY USAGE
of every key of the store (exact for those keys) and how much INFO memory's used_memory grew while
filling (the whole server: other users of a shared Redis add noise to it). Then it claims N other
URLs, never inserted, as another page would: each one refused is a false positive (a URL the crawl
would never fetch), and releases them. Last, it deletes the store's keys and reads how much
used_memory fell (a short window, so less noise). The store is sized for C URLs (default N).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from bench import services
from crawler.config import DedupConfig
from crawler.dedup.store import SeenStore, bloom_shape
from crawler.frontier.urls import fingerprint
from crawler.names import Names

MODES = ("plain", "compact", "bloom")
CLAIMANT = fingerprint("http://127.0.0.31:8081/")
PROBER = fingerprint("http://127.0.0.32:8081/")


@dataclass(frozen=True, slots=True)
class Measured:
    """One mode's store after `urls` URLs."""

    mode: str
    layout: str
    urls: int
    keys: int
    encodings: str
    key_bytes: int  # MEMORY USAGE summed over the store's keys
    used_memory_delta: int  # INFO memory used_memory, after filling minus before
    freed: int  # used_memory before deleting the store's keys minus after (one DEL: less noise)
    seconds: float  # claim + confirm of `urls`
    probe_seconds: float
    false_positives: int  # of `urls` other URLs claimed, those refused
    lost: int  # of the `urls` inserted, those refused as already seen
    expected_rate: float | None  # Bloom: the rate its shape predicts at `urls`


HEADER = (
    f"{'mode':<8} {'MEMORY USAGE':>13} {'B/URL':>6} {'grew B/URL':>10} {'freed B/URL':>11} "
    f"{'fill s':>6} {'probe s':>7} {'false positives':>18}  keys (encoding)"
)


def line(m: Measured) -> str:
    """One row for a person."""
    rate = m.false_positives / m.urls
    fp = f"{m.false_positives} = {100 * rate:.4f}%"
    return (
        f"{m.mode:<8} {m.key_bytes:>13,} {m.key_bytes / m.urls:>6.2f} {m.used_memory_delta / m.urls:>10.2f} "
        f"{m.freed / m.urls:>11.2f} {m.seconds:>6.1f} {m.probe_seconds:>7.1f} {fp:>18}  "
        f"{m.keys} ({m.encodings})"
    )


def report(results: Sequence[Measured], batch: int) -> str:
    """The table, with each mode's layout under it."""
    urls = results[0].urls
    lines = [
        f"{urls:,} URLs per mode, claimed and confirmed in batches of {batch} as routing does; "
        f"then {urls:,} other URLs claimed (refused = false positive) and released",
        HEADER,
        *(line(m) for m in results),
        "",
    ]
    for m in results:
        extra = ""
        if m.expected_rate is not None:
            extra = (
                f"; expected false positives at {m.urls:,} URLs {100 * m.expected_rate:.4f}%; "
                f"{m.lost} of the {m.urls:,} URLs inserted were refused as seen while filling"
            )
        lines.append(f"{m.mode}: {m.layout}{extra}")
    return "\n".join(lines)


def _url(i: int) -> str:
    return f"http://127.0.0.{31 + i % 4}:8081/p/{i}.html"


def _other(i: int) -> str:
    return f"http://127.0.0.{31 + i % 4}:8081/q/{i}.html"


async def _used_memory(client: Redis) -> int:
    info = await client.info("memory")
    return int(info["used_memory"])


async def _keys(client: Redis, prefix: str) -> list[bytes]:
    return [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]


async def bench_mode(client: Redis, mode: str, urls: int, capacity: int, batch: int) -> Measured:
    """Fill a fresh store of `mode` with `urls` fingerprints, measure it, probe it with others."""
    with services.key_prefix("dedupbench") as prefix:
        config = DedupConfig.model_validate({"mode": mode, "capacity": capacity})
        store = SeenStore(client, Names(prefix), config)
        before = await _used_memory(client)
        started = time.monotonic()
        lost = 0  # new URLs refused while filling: Bloom's false positives as a crawl meets them
        for start in range(0, urls, batch):
            fps = [fingerprint(_url(i)) for i in range(start, min(start + batch, urls))]
            fresh = await store.claim(fps, CLAIMANT)
            lost += fresh.count(False)
            if lost and mode != "bloom":
                raise SystemExit(f"bench: {mode}: a new URL was refused: a fingerprint collision?")
            await store.confirm([fp for fp, new in zip(fps, fresh, strict=True) if new])
        seconds = time.monotonic() - started
        after = await _used_memory(client)
        keys = await _keys(client, prefix)
        key_bytes = 0
        encodings: Counter[str] = Counter()
        for key in keys:
            key_bytes += int(await client.memory_usage(key, samples=0) or 0)
            encoding = await client.object("encoding", key)
            encodings[encoding.decode() if isinstance(encoding, bytes) else str(encoding)] += 1
        started = time.monotonic()
        refused = 0
        for start in range(0, urls, batch):
            fps = [fingerprint(_other(i)) for i in range(start, min(start + batch, urls))]
            fresh = await store.claim(fps, PROBER)
            refused += fresh.count(False)
            await store.release([fp for fp, new in zip(fps, fresh, strict=True) if new])
        probe_seconds = time.monotonic() - started
        before_delete = await _used_memory(client)
        for i in range(0, len(keys), 1000):
            await client.delete(*keys[i : i + 1000])
        freed = before_delete - await _used_memory(client)
        return Measured(
            mode,
            store.layout,
            urls,
            len(keys),
            ", ".join(f"{n} {e}" for e, n in encodings.most_common()),
            key_bytes,
            after - before,
            freed,
            seconds,
            probe_seconds,
            refused,
            lost,
            bloom_shape(capacity, config.error_rate).false_positive_rate(urls) if mode == "bloom" else None,
        )


async def bench(
    urls: int, modes: Sequence[str], capacity: int | None = None, batch: int = 40
) -> list[Measured]:
    """Measure each mode in turn, on one Redis connection."""
    client = Redis.from_url(services.REDIS_URL)
    try:
        return [await bench_mode(client, mode, urls, capacity or urls, batch) for mode in modes]
    finally:
        await client.aclose()


def _modes(value: str) -> list[str]:
    modes = [m.strip() for m in value.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(f"modes are {', '.join(MODES)}, comma-separated")
    return modes


def main(argv: Sequence[str] | None = None) -> None:
    """Run the dedup bench and print its result."""
    parser = argparse.ArgumentParser(prog="python -m bench.dedup", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000, help="URLs to store (default %(default)s)")
    parser.add_argument("--mode", type=_modes, default=list(MODES), help="modes to measure (default all)")
    parser.add_argument("--capacity", type=int, help="dedup.capacity of the stores (default: --urls)")
    parser.add_argument("--batch", type=int, default=40, help="URLs per claim (default %(default)s: a page)")
    args = parser.parse_args(argv)
    print(report(asyncio.run(bench(args.urls, args.mode, args.capacity, args.batch)), args.batch))


if __name__ == "__main__":
    main()
