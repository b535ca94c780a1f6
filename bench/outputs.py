"""Outputs (issue #48), against moto's S3 server on loopback, each as ratios within one run:

python -m bench.outputs upload [--gb 1]             # WARC files to object storage: MB/s against a local copy
python -m bench.outputs archive [--pairs 2] [--pages 5000]   # CPU per page, archive to S3 against local
python -m bench.outputs webhooks [--versions 5000]  # deliveries/s, a receiver failing 1 in 10 against none

`upload` writes files of real WARC records (the archive's own, of bench-like 30 KB pages) into a
spool, copies them to another local directory (the baseline), then uploads them with the archive's
uploader: multipart, CRC-32 per part, the store's size and checksum checked, each file deleted after.
`archive` runs bench.run's crawl (two consumers, SQLite) in pairs, the archive local then in S3
(both rotating at 64 MB, so files are uploaded during the crawl). `webhooks` publishes versions to the
change feed, then times a deliverer POSTing them to a receiver of its own (another process) that
answers 500 to one request in ten, then to one that never fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aio_pika
from aiohttp import web

from bench import nginx
from bench.procs import service_cpu
from bench.run import ARCHIVE_DIR, Config, Paired, _aligned, _configured, _fmt, _mean, _pairs, _tool_ms
from bench.s3 import MotoServer, free_port, moto
from bench.site import SiteSpec, write
from bench.tools import TOOL, Bench, Result, run_crawler
from crawler import connections
from crawler.archive import Archive, Exchange
from crawler.archive.uploader import Uploader
from crawler.config import CrawlConfig, parse_config
from crawler.frontier.exchanges import declare, topology
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.storage import ObjectStore, ObjectUrl
from crawler.webhooks import delivering

MB = 1_000_000
FILE_BYTES = 250 * MB  # four files a gigabyte
ARCHIVE_MAX = 64_000_000  # both arms of `archive` rotate here, so the S3 arm uploads while it crawls


def _moto_cpu(server: MotoServer) -> float:
    """CPU seconds moto's process has used."""
    fields = Path(f"/proc/{server.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- upload --------------------------------------------------------------------------------------


def _warc_block(work: Path, size: int) -> bytes:
    """`size` bytes of WARC records as the archive writes them: bench-like pages, gzipped one each."""
    page = (
        "<html><head><title>p</title></head><body><h1>Product</h1>" + "lorem ipsum dolor " * 1600
    ).encode()
    directory = work / "block"

    async def written() -> None:
        async with Archive(directory, max_bytes=10**11, prefix="bench") as archive:
            for i in range(600):
                body = page.replace(b"Product", f"Product {i}".encode())
                when = datetime.now(UTC)
                await archive.write(
                    Exchange(f"http://127.0.0.31/p/{i}", 200, [("Content-Type", "text/html")], body, [], when)
                )

    asyncio.run(written())
    (path,) = directory.glob("*.warc.gz")
    data = path.read_bytes()
    shutil.rmtree(directory)
    return (data * (size // len(data) + 1))[:size]


def upload(gb: float, work: Path) -> None:
    """Upload `gb` GB of WARC files; print MB/s, CPU, and the ratio to a local copy."""
    spool, copies = work / "spool", work / "copies"
    for d in (spool, copies):
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
    total = int(gb * 1_000_000_000)
    count = max(1, math.ceil(total / FILE_BYTES))
    block = _warc_block(work, total // count)
    names = []
    for i in range(count):
        name = f"bench-{i:05d}.warc.gz"
        with (spool / name).open("wb") as f:
            f.write(block)
            f.flush()
            os.fsync(f.fileno())
        names.append(name)
    size = count * len(block)
    started, cpu = time.monotonic(), time.process_time()
    for name in names:
        with (spool / name).open("rb") as src, (copies / name).open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
    local_s, local_cpu = time.monotonic() - started, time.process_time() - cpu
    shutil.rmtree(copies)
    with moto() as server:
        store = ObjectStore(server.endpoint)
        store.client.create_bucket(Bucket="bench")
        uploader = Uploader(spool, store, ObjectUrl("bench", "warc"))
        moto_before = _moto_cpu(server)
        started, cpu = time.monotonic(), time.process_time()
        uploader.start()
        while uploader.pending():
            time.sleep(0.05)
        s3_s, s3_cpu = time.monotonic() - started, time.process_time() - cpu
        moto_cpu = _moto_cpu(server) - moto_before
        left = uploader.close()
        listed = store.client.list_objects_v2(Bucket="bench").get("Contents", [])
        stored = sum(o.get("Size", 0) for o in listed)
    print(f"{count} WARC files, {size / MB:,.0f} MB ({len(block) / MB:.0f} MB each)")
    rows = [
        ("to", "seconds", "MB/s", "our CPU s", "CPU s/GB", "store CPU s"),
        (
            "local copy",
            f"{local_s:.1f}",
            f"{size / MB / local_s:.0f}",
            f"{local_cpu:.1f}",
            f"{local_cpu / (size / 1e9):.2f}",
            "-",
        ),
        (
            "S3 (moto)",
            f"{s3_s:.1f}",
            f"{size / MB / s3_s:.0f}",
            f"{s3_cpu:.1f}",
            f"{s3_cpu / (size / 1e9):.2f}",
            f"{moto_cpu:.1f}",
        ),
    ]
    print("\n".join(_aligned(rows, 1)))
    print(
        f"upload to S3: {size / MB / s3_s:.0f} MB/s, {s3_s / local_s:.1f}x the local copy's time; "
        f"{len(listed)} objects, {stored / MB:,.0f} MB in the store; {len(left)} left in the spool"
    )


# -- archive: CPU per page, S3 against local -------------------------------------------------------


@dataclass(slots=True)
class Stored(Paired):
    """One crawl of the comparison: archive in S3 (`on`) or local."""

    archive_bytes: int = 0
    files: int = 0
    left: int = 0  # files still in the spool after the crawl (S3 only)


def _rotating(config: Config) -> Config:
    defaults = config["defaults"]
    assert isinstance(defaults, dict)
    return {**config, "archive_max_bytes": ARCHIVE_MAX, "defaults": {**defaults, "archive": True}}


def _stored_run(server: MotoServer, processes: int, sink: str, pair: int, s3: bool, bench: Bench) -> Stored:
    bench.work = bench.work / f"archive-{sink}-{pair}-{'s3' if s3 else 'local'}"
    directory, spool = bench.work / "archive", bench.work / "spool"
    bucket = f"bench-{uuid.uuid4().hex[:12]}"
    env = {ARCHIVE_DIR: str(directory), "CRAWLER_ARCHIVE_SPOOL": str(spool)}
    if s3:
        ObjectStore(server.endpoint).client.create_bucket(Bucket=bucket)
        env |= {ARCHIVE_DIR: f"s3://{bucket}/warc", "CRAWLER_S3_ENDPOINT_URL": server.endpoint}
    with _configured(_rotating, env):
        result = run_crawler(bench, processes, sink)
    result.tool += " s3" if s3 else " local"
    if s3:
        listed = ObjectStore(server.endpoint).client.list_objects_v2(Bucket=bucket).get("Contents", [])
        left = len(list(spool.glob("*.warc.gz*"))) if spool.exists() else 0
        return Stored(pair, sink, s3, result, sum(o.get("Size", 0) for o in listed), len(listed), left)
    files = sorted(directory.glob("*.warc.gz"))
    return Stored(pair, sink, s3, result, sum(f.stat().st_size for f in files), len(files))


def archive_table(runs: Sequence[Stored]) -> str:
    """Each crawl, then the mean CPU per page of the S3 archive against the local one."""
    rows = [("pair", "sink", "archive", "pages", "pages/s", "tool ms/p", "archive KB/p", "files", "left")]
    for run in runs:
        r = run.result
        rows.append(
            (
                str(run.pair),
                run.sink,
                "s3" if run.on else "local",
                f"{r.pages}/{r.expected}",
                f"{r.pages_per_s:.1f}",
                _fmt(r.ms_per_page(TOOL), ".2f"),
                f"{run.archive_bytes / r.pages / 1000:.2f}" if r.pages else "-",
                str(run.files),
                str(run.left) if run.on else "-",
            )
        )
    lines = _aligned(rows, 3)
    of = {on: [r for r in runs if r.on == on] for on in (False, True)}
    if of[False] and of[True]:
        cpu = {on: _mean(of[on], _tool_ms) for on in of}
        lines.append(
            f"mean: tool CPU with the archive in S3 {cpu[True]:.2f} ms/p, local {cpu[False]:.2f} ms/p: "
            f"{cpu[True] / cpu[False] - 1:+.1%} CPU per page (aim within 5%)"
        )
    return "\n".join(lines)


def archive(pairs: int, pages: int, processes: int, work: Path) -> None:
    spec = SiteSpec(pages=pages)
    site = write(spec, work / f"site-{pages}")
    run_dir = work / datetime.now().strftime("outputs-%Y%m%d-%H%M%S")
    runs: list[Stored] = []
    with moto() as server, nginx.serve(spec, site, run_dir / "nginx") as served:

        def one(processes: int, sink: str, pair: int, s3: bool, bench: Bench) -> Stored:
            return _stored_run(server, processes, sink, pair, s3, bench)

        planned = _pairs(pairs, processes, ["sqlite"], "archive", ("local", "s3"), one, runs)
        for label, run in planned:
            print(f"running {label} ...", flush=True)
            result: Result = run(Bench(spec, served, run_dir, 1800, 120))
            print(
                f"  {result.pages} pages in {result.seconds:.1f}s: {result.pages_per_s:.1f} pages/s",
                flush=True,
            )
    print()
    print(archive_table(runs))


# -- webhooks --------------------------------------------------------------------------------------


def receiver_main(port: int, fail_every: int) -> None:
    """A receiver: 500 to every `fail_every`-th POST (0: none), 200 to the others."""
    seen = 0

    async def hook(request: web.Request) -> web.Response:
        nonlocal seen
        await request.read()
        seen += 1
        return web.Response(status=500 if fail_every and seen % fail_every == 0 else 200)

    app = web.Application()
    app.router.add_post("/hook", hook)
    web.run_app(app, host="127.0.0.41", port=port, print=None, access_log=None)


@contextmanager
def _receiver(fail_every: int) -> Iterator[str]:
    port = free_port("127.0.0.41")
    argv = [
        sys.executable,
        "-m",
        "bench.outputs",
        "receiver",
        "--port",
        str(port),
        "--fail-every",
        str(fail_every),
    ]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.41:{port}/hook"
    try:
        import httpx

        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url, timeout=1, trust_env=False)
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        process.terminate()
        process.wait(10)


async def _deliver(amqp_url: str, versions: int, url: str) -> tuple[float, float, float]:
    """Seconds and CPU seconds to deliver `versions` versions to `url`, and the POSTs per version."""
    names = Names(f"benchwh{uuid.uuid4().hex[:8]}")
    config: CrawlConfig = parse_config(
        json.dumps(
            {
                "allow_private_networks": True,
                "domains": {"shop.test": {}},
                "webhooks": [{"url": url, "secret": "bench-secret-0123456789", "retry_delays": [0.5] * 6}],
            }
        )
    )
    async with connections.broker(amqp_url, "bench webhooks") as connection:
        channel = await connection.channel(publisher_confirms=True)
        await declare(channel, topology(config, names))
        changes = await channel.get_exchange(names.changes, ensure=False)
        for i in range(versions):
            body = {
                "url": f"https://shop.test/p/{i}",
                "domain": "shop.test",
                "crawl": None,
                "version": 1,
                "fetched_at": "2026-12-06T06:00:00Z",
                "kind": "new",
            }
            message = aio_pika.Message(json.dumps(body).encode(), message_id=f"{i}:1", type="new")
            await changes.publish(message, routing_key="shop.test")
        metrics = Metrics()
        started, cpu = time.monotonic(), time.process_time()
        async with delivering(lambda: config, names, connection, metrics, "bench webhooks"):
            while (  # noqa: ASYNC110 - a count in the metrics, read as a person would
                metrics.registry.get_sample_value(
                    "crawler_webhook_deliveries_total", {"webhook": url.split("/")[2], "outcome": "delivered"}
                )
                != versions
            ):
                await asyncio.sleep(0.05)
        seconds, cpu_s = time.monotonic() - started, time.process_time() - cpu
        tries = sum(
            metrics.registry.get_sample_value(
                "crawler_webhook_deliveries_total", {"webhook": url.split("/")[2], "outcome": o}
            )
            or 0.0
            for o in ("delivered", "retried", "dead")
        )
        for queue in (
            names.webhooks,
            *(names.retry_queue(d) for d in config.retry_tiers),
            names.dead,
            names.unrouted,
        ):
            await channel.queue_delete(queue)
        for exchange in (names.frontier, names.unrouted, names.dead, names.retry, names.changes):
            await channel.exchange_delete(exchange)
        await channel.close()
    return seconds, cpu_s, tries / versions


def webhooks(versions: int, amqp_url: str) -> None:
    rows = [("receiver", "versions", "seconds", "deliveries/s", "POSTs/version", "CPU ms/delivery")]
    rates = {}
    for fail_every, label in ((10, "500 one in ten"), (0, "never fails")):
        with _receiver(fail_every) as url:
            seconds, cpu, posts = asyncio.run(_deliver(amqp_url, versions, url))
        rates[fail_every] = versions / seconds
        rows.append(
            (
                label,
                str(versions),
                f"{seconds:.1f}",
                f"{versions / seconds:.0f}",
                f"{posts:.2f}",
                f"{1000 * cpu / versions:.2f}",
            )
        )
    print("\n".join(_aligned(rows, 1)))
    print(f"failing one in ten: {rates[10] / rates[0]:.2f}x the deliveries/s of a receiver that never fails")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.outputs", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("upload")
    p.add_argument("--gb", type=float, default=1.0)
    p.add_argument("--work", type=Path, default=Path("/tmp/crawler-bench/outputs"))
    p = sub.add_parser("archive")
    p.add_argument("--pairs", type=int, default=2)
    p.add_argument("--pages", type=int, default=5000)
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--work", type=Path, default=Path("/tmp/crawler-bench"))
    p = sub.add_parser("webhooks")
    p.add_argument("--versions", type=int, default=5000)
    p.add_argument(
        "--amqp-url", default=os.environ.get("CRAWLER_AMQP_URL", "amqp://guest:guest@localhost:5672/")
    )
    p = sub.add_parser("receiver")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--fail-every", type=int, default=10)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.what == "upload":
        upload(args.gb, args.work)
    elif args.what == "archive":
        print(f"background: {service_cpu()}")
        archive(args.pairs, args.pages, args.processes, args.work)
    elif args.what == "webhooks":
        webhooks(args.versions, args.amqp_url)
    else:
        receiver_main(args.port, args.fail_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
