"""The sitemap reader on a 50,000-URL gzipped sitemap: URLs per second, the peak RSS of a process that
reads it, and tracemalloc's peak.

python -m bench.sitemap [--urls 50000] [--rounds 5] [--chunk 65536]

The sitemap (realistic URLs of ~80 characters, each with a lastmod) is written to a file, then each
measurement runs in a fresh interpreter that reads the file in `--chunk` pieces through the reader,
so its peak RSS (VmHWM) is the reader's on top of an interpreter with the crawler imported. For
comparison, one more loads the same file the usual way: gunzipped whole, parsed whole.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypedDict, cast

from crawler.parse.sitemaps import SitemapReader

SITEMAP_URL = "https://www.example-shop.test/sitemap-products-1.xml.gz"
CATEGORIES = ["garden-furniture", "kitchen-appliances", "outdoor-lighting", "bathroom", "office-chairs"]
WORDS = ["oak", "steel", "compact", "deluxe", "blue", "grey", "set", "large", "classic", "modern", "pro"]
MB = 1024 * 1024


class Run(TypedDict):
    """One measured read, as the child process prints it."""

    urls: int
    seconds: float
    before_kb: int  # VmHWM once the interpreter and the crawler are loaded, before reading
    peak_kb: int  # VmHWM after reading
    traced: int  # tracemalloc's peak while reading (0 unless traced)
    truncated: str | None


def build(urls: int) -> bytes:
    """A gzipped urlset of `urls` product URLs (~80 characters each) with their lastmod."""
    rng = random.Random(31)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    parts = [
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    ]
    for i in range(urls):
        slug = "-".join(rng.sample(WORDS, 3))
        loc = f"https://www.example-shop.test/{rng.choice(CATEGORIES)}/{slug}-{i:06d}.html?ref=sm"
        lastmod = (start + timedelta(minutes=rng.randrange(600_000))).isoformat(timespec="seconds")
        parts.append(f"  <url><loc>{loc}</loc><lastmod>{lastmod}</lastmod></url>\n".encode())
    parts.append(b"</urlset>\n")
    return gzip.compress(b"".join(parts))


def _peak_rss_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def _chunks(path: Path, size: int) -> Iterator[bytes]:
    with path.open("rb") as file:
        while chunk := file.read(size):
            yield chunk


def _child(path: Path, mode: str, chunk: int) -> Run:
    """One measurement in this (fresh) process."""
    from lxml import etree

    before = _peak_rss_kb()
    if mode == "traced":
        tracemalloc.start()
    started = time.perf_counter()
    if mode == "whole":
        root = etree.fromstring(gzip.decompress(path.read_bytes()))
        locs = [e.text for e in root.iter("{*}loc")]
        count, truncated = len(locs), None
    else:
        reader = SitemapReader(SITEMAP_URL)
        count = sum(1 for _ in reader.read(_chunks(path, chunk)))
        truncated = reader.report.truncated
    took = time.perf_counter() - started
    traced = tracemalloc.get_traced_memory()[1] if mode == "traced" else 0
    return Run(
        urls=count, seconds=took, before_kb=before, peak_kb=_peak_rss_kb(), traced=traced, truncated=truncated
    )


def _measure(path: Path, mode: str, chunk: int) -> Run:
    done = subprocess.run(
        [sys.executable, "-m", "bench.sitemap", "--child", str(path), "--mode", mode, "--chunk", str(chunk)],
        capture_output=True,
        text=True,
        check=True,
    )
    return cast(Run, json.loads(done.stdout))


def main(argv: Sequence[str] | None = None) -> None:
    """Build the sitemap, then measure it in fresh processes; print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.sitemap", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=50_000, help="URLs in the sitemap (default 50,000)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed reads, each in a fresh process (default 5)"
    )
    parser.add_argument("--chunk", type=int, default=64 * 1024, help="bytes per chunk read (default 65536)")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="stream", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child, args.mode, args.chunk)))
        return
    with tempfile.TemporaryDirectory() as work:
        path = Path(work) / "sitemap.xml.gz"
        path.write_bytes(build(args.urls))
        size = path.stat().st_size
        unpacked = len(gzip.decompress(path.read_bytes()))
        runs = [_measure(path, "stream", args.chunk) for _ in range(args.rounds)]
        traced = _measure(path, "traced", args.chunk)
        whole = _measure(path, "whole", args.chunk)
    rates = sorted(r["urls"] / r["seconds"] for r in runs)
    print(
        f"{args.urls:,} URLs, {size / MB:.2f} MB gzipped, {unpacked / MB:.2f} MB uncompressed, "
        f"read in {args.chunk:,}-byte chunks, {args.rounds} rounds, each in a fresh process"
    )
    print(f"  URLs read: {runs[0]['urls']:,} (truncated: {runs[0]['truncated']})")
    print(
        f"  URLs/s: median {statistics.median(rates):,.0f} (min {rates[0]:,.0f}, max {rates[-1]:,.0f}); "
        f"median {statistics.median(r['seconds'] for r in runs):.3f}s a read"
    )
    peak, before = max(r["peak_kb"] for r in runs), max(r["before_kb"] for r in runs)
    print(f"  peak RSS (VmHWM): {peak / 1024:.1f} MB at most, of which {before / 1024:.1f} MB before reading")
    print(f"  tracemalloc peak while reading: {traced['traced'] / MB:.2f} MB")
    print(
        "  for comparison, gunzipped and parsed whole (lxml.etree.fromstring): "
        f"{whole['seconds']:.3f}s, peak RSS {whole['peak_kb'] / 1024:.1f} MB, "
        f"of which {whole['before_kb'] / 1024:.1f} MB before reading"
    )


if __name__ == "__main__":
    main()
