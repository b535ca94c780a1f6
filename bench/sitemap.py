"""The sitemap reader on a 50,000-URL gzipped sitemap: URLs per second, the peak RSS of a process that
reads it, and tracemalloc's peak.

python -m bench.sitemap [--urls 50000] [--rounds 5] [--chunk 65536]
python -m bench.sitemap --worker [--urls 50000]

The sitemap (realistic URLs of ~80 characters, each with a lastmod) is written to a file, then each
measurement runs in a fresh interpreter that reads the file in `--chunk` pieces through the reader,
so its peak RSS (VmHWM) is the reader's on top of an interpreter with the crawler imported. For
comparison, one more loads the same file the usual way: gunzipped whole, parsed whole.

With `--worker`, the same file is read by the crawler: a site on 127.0.0.11 names it in robots.txt,
`crawler seed` begins a crawl (a round of sitemap reading), and one `crawler-consume` finds it,
fetches it, reads it and routes its URLs through dedup into RabbitMQ (each a new page of the crawl).
Timed from the seed to the file's reading stored; the consumer's RSS is sampled before and while.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sqlite3
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


def build(urls: int, site: str = "https://www.example-shop.test") -> bytes:
    """A gzipped urlset of `urls` product URLs (~80 characters each) with their lastmod."""
    rng = random.Random(31)
    start = datetime(2024, 1, 1, tzinfo=UTC)
    parts = [
        b'<?xml version="1.0" encoding="UTF-8"?>\n'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    ]
    for i in range(urls):
        slug = "-".join(rng.sample(WORDS, 3))
        loc = f"{site}/{rng.choice(CATEGORIES)}/{slug}-{i:06d}.html?ref=sm"
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


def through_a_worker(urls: int) -> None:
    """Three such files (distinct URLs) read by a worker one after the other, from the seed to their
    readings stored; print the figures. The worker's URL caches (65,536 entries each) fill on the
    way, as on any crawl of that many URLs: the third file shows what a file costs once they are."""
    from bench.procs import Child, rss_mb
    from bench.services import key_prefix, vhost
    from demo.site import Reply, Route, Site, free_port, serve
    from tests.support.services import REDIS_URL

    host, ip = "shop.bench.test", "127.0.0.11"
    port = free_port(ip)
    origin = f"http://{host}:{port}"
    files = {f"/sitemap-{n}.xml.gz": build(urls, f"{origin}/{n}") for n in (1, 2, 3)}  # distinct URLs
    named = "".join(f"Sitemap: {origin}{path}\n" for path in files)
    routes: dict[str, Route] = {
        "/robots.txt": Reply(
            200, f"User-agent: *\nAllow: /\n{named}".encode(), {"Content-Type": "text/plain"}
        ),
        **{path: Reply(200, body, {"Content-Type": "application/gzip"}) for path, body in files.items()},
    }
    with (
        tempfile.TemporaryDirectory() as work,
        vhost() as amqp_url,
        key_prefix("bench-sitemap-") as prefix,
        serve(Site(host, ip, port, routes)),
    ):
        db = Path(work) / "crawl.db"
        config = Path(work) / "domains.yaml"
        # A slow rate: the pages wait for their tokens, the sitemaps are read at once; one delivery
        # at a time: one file, then the other.
        config.write_text(
            f"defaults: {{rate: 0.5, burst: 1, prefetch: 1, max_pages: {urls * 4}}}\n"
            f"resolve: {{{host}: {ip}}}\nallow_private_networks: true\ndomains: {{{host}: {{}}}}\n"
        )
        env = {
            **os.environ,
            "CRAWLER_AMQP_URL": amqp_url,
            "CRAWLER_REDIS_URL": REDIS_URL,
            "CRAWLER_DATABASE_URL": f"sqlite:///{db}",
            "CRAWLER_CONFIG": str(config),
            "CRAWLER_PREFIX": prefix,
        }
        bin_dir = Path(sys.executable).parent
        subprocess.run([str(bin_dir / "crawler"), "db", "upgrade"], env=env, check=True, capture_output=True)
        marks: list[tuple[float, float]] = []  # (seconds from the seed, peak RSS MB so far) per reading
        with open(Path(work) / "consume.log", "wb") as log:
            consumer = Child.start("consume", [str(bin_dir / "crawler-consume")], env, log)
            try:
                time.sleep(3)  # started and subscribed: its RSS before any sitemap
                before = peak = rss_mb(consumer.pid) or 0.0
                started = time.perf_counter()
                seed = [str(bin_dir / "crawler"), "seed", f"{origin}/"]
                subprocess.run(seed, env=env, check=True, capture_output=True)
                while len(marks) < len(files) and time.perf_counter() - started < 300:
                    peak = max(peak, rss_mb(consumer.pid) or 0.0)
                    if _readings(db) > len(marks):
                        marks.append((time.perf_counter() - started, peak))
                    time.sleep(0.05)
            finally:
                consumer.proc.terminate()
                consumer.wait()
        if len(marks) < len(files):
            raise SystemExit("the sitemaps were not read within 300 s; see the consumer's log")
    size = len(files["/sitemap-1.xml.gz"]) / MB
    print(
        f"{len(files)} files of {urls:,} URLs each ({size:.2f} MB gzipped), read one after the other by one"
    )
    print(
        "crawler-consume from a seed: found in robots.txt, fetched, read, routed through dedup into RabbitMQ"
    )
    print(f"  consumer RSS before: {before:.1f} MB")
    previous = 0.0
    for n, (at, peak) in enumerate(marks, 1):
        took = at - previous
        print(f"  file {n}: {took:.2f}s, {urls / took:,.0f} URLs/s; RSS at most {peak:.1f} MB")
        previous = at


def _readings(db: Path) -> int:
    """How many sitemap readings are stored."""
    try:
        with sqlite3.connect(db) as conn:
            return int(conn.execute("SELECT count(*) FROM sitemaps").fetchone()[0])
    except sqlite3.Error:
        return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Build the sitemap, then measure it in fresh processes; print the figures."""
    parser = argparse.ArgumentParser(prog="python -m bench.sitemap", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=50_000, help="URLs in the sitemap (default 50,000)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="timed reads, each in a fresh process (default 5)"
    )
    parser.add_argument("--chunk", type=int, default=64 * 1024, help="bytes per chunk read (default 65536)")
    parser.add_argument("--worker", action="store_true", help="read it through a crawler-consume instead")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="stream", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        print(json.dumps(_child(args.child, args.mode, args.chunk)))
        return
    if args.worker:
        through_a_worker(args.urls)
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
