"""How cost grows (issue #20): pages/s, CPU and memory against consumers, domains and site size.

python -m bench.scaling [--pages N] [--only processes,domains,size,dedup,ceilings] [--repeat R]

Every crawl is `bench.tools`' measured crawl (a fresh vhost, key prefix and SQLite file; `crawler seed`
then `crawler-consume --burst`) of the bench site (`bench.site`), its domains named `s001.test` ...
and resolved by domains.yaml onto 127.0.0.71-74, where one nginx serves each by its Host. Series:
- processes: 1, 2 and 3 consumers on 4 domains x N/4 pages;
- domains: 4, 40 and 400 domains, N pages in all, 2 consumers;
- size: sites of 5,000 and 50,000 pages, and 5,000 pages crawled on top of 495,000 URLs seeded into
  the dedup store (a 500,000-URL store without a 500,000-page crawl); the store's bytes per URL;
- dedup: one store per mode grown to 5,000, 50,000 and 500,000 URLs through crawler.dedup, its
  MEMORY USAGE at each size;
- ceilings: bench.router's ways, and confirmed persistent publishes from 1, 2 and 3 processes at once
  (what the broker sustains here);
then a projection for 100 million pages a day from the measured per-page costs.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import multiprocessing
import os
import queue
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import uvloop
import yaml
from redis.asyncio import Redis

from bench import nginx, router, services
from bench.dedup import _url
from bench.procs import Child, service_cpu
from bench.run import background
from bench.site import SiteSpec, write
from bench.tools import (
    NGINX,
    TOOL,
    Bench,
    Result,
    _crawler_pages,
    _db_progress,
    _measured,
    _memory,
    _script,
    _watch,
    crawler_config,
    crawler_env,
)
from crawler.config import DedupConfig, parse_config
from crawler.dedup.store import SeenStore
from crawler.frontier.client import frontier
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.publisher import Publisher
from crawler.frontier.urls import fingerprint
from crawler.names import Names
from crawler.settings import Settings

IPS = tuple(f"127.0.0.{71 + i}" for i in range(4))  # apart from bench.run's .31-.34 and bench.many's .41-.44
PORT = 8111
SERIES = ("processes", "domains", "size", "dedup", "ceilings")
KINDS = (TOOL, "rabbitmq", "redis", NGINX)
PAGES_PER_DAY = 100_000_000
SIZES = (5_000, 50_000, 500_000)
CLAIMANT = fingerprint("http://seeded.test/")
SEED_BATCH = 1_000
MIN_CAPACITY = 1_000  # the least dedup.capacity allows
EARLY = 0.1  # RSS is fitted from this share of the pages on: the first pages fill caches and pools


def domain_names(count: int) -> tuple[str, ...]:
    """s001.test, s002.test, ...: the bench's domains, resolved onto IPS."""
    return tuple(f"s{i:03d}.test" for i in range(1, count + 1))


def site_spec(domains: int, pages: int, port: int = PORT) -> SiteSpec:
    """The bench site on `domains` named domains of `pages` pages each."""
    return SiteSpec(pages=pages, hosts=domain_names(domains), port=port)


def nginx_config(spec: SiteSpec, site: Path, state: Path) -> str:
    """One server per domain, chosen by Host, each listening on every IP of IPS."""
    listens = "".join(f"        listen {ip}:{spec.port};\n" for ip in IPS)
    servers = "\n".join(
        f"    server {{\n{listens}        server_name {host};\n        root {site / host};\n"
        f"        index index.html;\n    }}"
        for host in spec.hosts
    )
    return nginx.frame(servers, state, connections=8192, open_files=8000)


def config_for(spec: SiteSpec, mode: str, capacity: int) -> dict[str, object]:
    """bench.run's domains.yaml with the names resolved onto IPS and the dedup store sized for `capacity`."""
    config = crawler_config(spec)
    config["resolve"] = {host: IPS[i % len(IPS)] for i, host in enumerate(spec.hosts)}
    config["dedup"] = {"mode": mode, "capacity": capacity}
    return config


# -- the crawls -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Case:
    """One crawl to run."""

    series: str
    domains: int
    pages: int  # per domain
    processes: int
    seeded: int = 0  # URLs put in the dedup store before the crawl
    port: int = PORT  # nginx serves the site there

    @property
    def spec(self) -> SiteSpec:
        """The site it crawls."""
        return site_spec(self.domains, self.pages, self.port)

    @property
    def label(self) -> str:
        """Its name in logs and directories."""
        return f"{self.series}-{self.domains}x{self.pages}-p{self.processes}-s{self.seeded}"


@dataclass(slots=True)
class Crawl:
    """One crawl, measured."""

    case: Case
    result: Result
    store_bytes: int = 0  # MEMORY USAGE of every key of the dedup store after the crawl
    store_urls: int = 0  # URLs in it (seeded ones included)
    db_bytes: int = 0  # the SQLite file after the crawl
    rss: list[list[tuple[int, float]]] = field(default_factory=list)  # per consumer: (pages, MB)
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after

    @property
    def slope(self) -> float | None:
        """The steepest consumer's RSS growth, MB per 10,000 pages, from 10 % of the pages on."""
        slopes = [s for r in self.rss if (s := rss_slope(r, int(EARLY * self.result.expected))) is not None]
        return max(slopes, default=None)


def rss_slope(samples: Sequence[tuple[int, float]], start: int) -> float | None:
    """Least-squares slope of RSS against pages done, in MB per 10,000 pages, from `start` pages on."""
    points = [(p, mb) for p, mb in samples if p >= start]
    if len({p for p, _ in points}) < 2:
        return None
    mean_p = sum(p for p, _ in points) / len(points)
    mean_mb = sum(mb for _, mb in points) / len(points)
    cov = sum((p - mean_p) * (mb - mean_mb) for p, mb in points)
    var = sum((p - mean_p) ** 2 for p, _ in points)
    return 10_000 * cov / var


async def _store_bytes(client: Redis, names: Names) -> int:
    total = 0
    async for key in client.scan_iter(match=f"{names.seen_key}*", count=1000):
        total += int(await client.memory_usage(key, samples=0) or 0)
    return total


async def _seed_store(names: Names, config: DedupConfig, start: int, stop: int) -> None:
    """Claim and confirm the URLs numbered start..stop-1 (not on any bench site), as routing does."""
    client = Redis.from_url(services.REDIS_URL)
    try:
        store = SeenStore(client, names, config)
        for first in range(start, stop, SEED_BATCH):
            fps = [fingerprint(_url(i)) for i in range(first, min(first + SEED_BATCH, stop))]
            fresh = await store.claim(fps, CLAIMANT)
            await store.confirm([fp for fp, new in zip(fps, fresh, strict=True) if new])
    finally:
        await client.aclose()


async def _store_state(names: Names, config: DedupConfig) -> tuple[int, int]:
    client = Redis.from_url(services.REDIS_URL)
    try:
        return await _store_bytes(client, names), await SeenStore(client, names, config).count()
    finally:
        await client.aclose()


def _seed(spec: SiteSpec, env: dict[str, str], out: Path) -> str:
    """`crawler seed` the site's index pages (before the clock starts); the crawl's id it prints."""
    path = out / "seed.log"
    with path.open("wb") as log:
        seed = Child.start("seed", [*_script("crawler"), "seed", *spec.index_urls()], env, log)
        try:
            if seed.wait():
                raise SystemExit(f"bench: `crawler seed` failed, see {path}")
        finally:
            seed.kill()
    return path.read_text().split()[-1]


def crawl(
    case: Case, sites: Path, work: Path, timeout: float, stall: float, mode: str, capacity: int
) -> Crawl:
    """Serve the case's site (kept under `sites` for the next run), seed its store if asked, crawl it."""
    spec = case.spec
    site = write(spec, sites / f"site-{case.domains}x{case.pages}")
    out = work / datetime.now().strftime(f"%H%M%S-{case.label}")
    out.mkdir(parents=True)
    config = out / "domains.yaml"
    config.write_text(yaml.safe_dump(config_for(spec, mode, capacity)))
    dedup = parse_config(config.read_text(), str(config)).dedup
    db = out / "crawl.db"
    result = Result("crawler", case.processes, spec.total)
    done = Crawl(case, result)
    listens = [(ip, spec.port) for ip in IPS]
    with (
        nginx.run(nginx_config(spec, site, out / "nginx"), listens, out / "nginx") as server,
        ExitStack() as stack,
    ):
        env = crawler_env(stack, config, db, "scalebench")
        names = Names(env["CRAWLER_PREFIX"], crawl=_seed(spec, env, out))
        if case.seeded:
            asyncio.run(_seed_store(names, dedup, 0, case.seeded))
        bench = Bench(spec, server, out, timeout, stall)
        before = os.getloadavg()[0]
        with _measured(bench, result) as children:
            started, started_at = time.monotonic(), time.time()
            for i in range(case.processes):
                log = stack.enter_context((out / f"consume-{i}.log").open("wb"))
                children.append(
                    Child.start(f"consume {i}", [*_script("crawler-consume"), "--burst"], env, log)
                )
            consumers = list(children)
            _watch(bench, result, started, consumers, _db_progress(db))
            result.exit_seconds = time.monotonic() - started
        done.load = (before, os.getloadavg()[0])
        done.store_bytes, done.store_urls = asyncio.run(_store_state(names, dedup))
        if done.store_urls != spec.total + case.seeded:
            result.notes.append(f"{done.store_urls} URLs in the store, expected {spec.total + case.seeded}")
    _crawler_pages(result, db, started_at)
    _memory(result, consumers)
    done.rss = [c.rss for c in consumers]
    done.db_bytes = db.stat().st_size
    return done


def cases(series: str, total: int, sizes: Sequence[int] = SIZES) -> list[Case]:
    """The crawls of one series; `total` pages for the processes and domains series, `sizes` for size."""
    if series == "processes":
        return [Case(series, 4, total // 4, n) for n in (1, 2, 3)]
    if series == "domains":
        return [Case(series, n, total // n, 2) for n in (4, 40, 400)]
    if series == "size":
        small, middle, large = sizes
        return [
            Case(series, 4, small // 4, 2),
            Case(series, 4, middle // 4, 2),
            Case(series, 4, small // 4, 2, seeded=large - small),
        ]
    raise ValueError(f"no crawls in series {series!r}")


# -- tables ---------------------------------------------------------------------------------------


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _columns(rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]


def crawl_table(crawls: Sequence[Crawl], first: Callable[[Crawl], str]) -> str:
    """Crawls as rows; the ratios are against the first row of the same repetition."""
    head = (
        "case", "pages", "seconds", "pages/s", "x first", *(f"{k} ms/p" for k in KINDS), "CPU x first",
        "store B/URL", "RSS MB 10%->end", "MB/10k pages", "load",
    )  # fmt: skip
    rows: list[Sequence[str]] = [head]
    base: Crawl | None = None
    for c in crawls:
        r = c.result
        if base is None or c.case == crawls[0].case:
            base = c
        tool, base_tool = r.ms_per_page(TOOL), base.result.ms_per_page(TOOL)
        rows.append(
            (
                first(c),
                f"{r.pages}/{r.expected}",
                f"{r.seconds:.1f}",
                f"{r.pages_per_s:.1f}",
                f"{r.pages_per_s / base.result.pages_per_s:.2f}" if base.result.pages_per_s else "-",
                *(_fmt(r.ms_per_page(k), ".2f") for k in KINDS),
                f"{tool / base_tool:.2f}" if tool and base_tool else "-",
                f"{c.store_bytes / c.store_urls:.1f}" if c.store_urls else "-",
                f"{_fmt(r.rss_early_mb, '.0f')}->{_fmt(r.rss_end_mb, '.0f')}",
                _fmt(c.slope, "+.2f"),
                f"{c.load[0]:.1f}-{c.load[1]:.1f}",
            )
        )
    lines = _columns(rows)
    for c in crawls:
        r = c.result
        if r.pages < r.expected:
            lines.append(f"note: {first(c)}: INCOMPLETE, {r.expected - r.pages} pages missing")
        lines.extend(f"note: {first(c)}: {note}" for note in r.notes)
    return "\n".join(lines)


def rss_course(c: Crawl) -> str:
    """Each consumer's RSS at 10, 25, 50, 75 and 100 % of the pages, and its fitted slope."""
    lines = [f"consumer RSS (MB) against pages stored, {c.case.domains} x {c.case.pages} pages:"]
    for n, samples in enumerate(c.rss):
        marks = []
        for share in (0.1, 0.25, 0.5, 0.75, 1.0):
            at = int(share * c.result.expected)
            mb = next((mb for done, mb in samples if done >= at), None)
            marks.append(f"{at:>6} {_fmt(mb, '.0f'):>4}")
        slope = rss_slope(samples, int(EARLY * c.result.expected))
        lines.append(f"  consumer {n}: " + " | ".join(marks) + f" | slope {_fmt(slope, '+.2f')} MB/10k pages")
    return "\n".join(lines)


# -- the dedup store as it grows ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Growth:
    """One mode's store measured at each size."""

    mode: str
    capacity: int
    sizes: tuple[tuple[int, int], ...]  # (URLs claimed, MEMORY USAGE of the store's keys)
    refused: int = 0  # of the URLs claimed, those refused as seen (Bloom's false positives)


def grow(modes: Sequence[str], capacities: Sequence[int], sizes: Sequence[int] = SIZES) -> list[Growth]:
    """A store per mode and capacity, grown through `sizes` and measured at each."""
    out = []
    for capacity in capacities:
        # A plain store has no capacity: once is enough.
        for mode in [m for m in modes if m != "plain" or capacity == capacities[0]]:
            config = DedupConfig.model_validate({"mode": mode, "capacity": capacity})
            with services.key_prefix("scaledup") as prefix:
                names, done, measured = Names(prefix), 0, []
                for size in sizes:
                    asyncio.run(_seed_store(names, config, done, size))
                    done = size
                    stored, count = asyncio.run(_store_state(names, config))
                    # Bloom refuses a few new URLs as seen (its false positives): they are not counted.
                    if count != size and mode != "bloom":
                        raise SystemExit(f"bench: {mode}: {count} URLs in the store, {size} claimed")
                    measured.append((size, stored))
                out.append(Growth(mode, capacity, tuple(measured), size - count))
                print(f"  {mode}, capacity {capacity:,}: {stored / size:.2f} B/URL at {size:,}", flush=True)
    return out


def growth_table(rows: Sequence[Growth]) -> str:
    """Bytes per URL of each store at each size."""
    sizes = [n for n, _ in rows[0].sizes]
    head = (
        "mode", "capacity", *(f"B/URL at {s:,}" for s in sizes), *(f"MB at {s:,}" for s in sizes), "refused",
    )  # fmt: skip
    body = [
        (
            g.mode,
            f"{g.capacity:,}",
            *(f"{b / n:.2f}" for n, b in g.sizes),
            *(f"{b / 1e6:.2f}" for _, b in g.sizes),
            str(g.refused),
        )
        for g in rows
    ]
    return "\n".join(_columns([head, *body]))


# -- ceilings -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Broker:
    """Confirmed persistent publishes from `processes` processes at once."""

    processes: int
    publishes: int
    seconds: float
    rabbitmq_cpu: float
    background: float  # others' use of the broker, cores

    @property
    def rate(self) -> float:
        """Publishes per second, all processes together."""
        return self.publishes / self.seconds

    @property
    def ms_per_publish(self) -> float:
        """The broker's CPU per publish, others' use taken off."""
        return 1000 * (self.rabbitmq_cpu - self.background * self.seconds) / self.publishes


def _publisher(urls: int, offset: int, ready: Any, go: Event, results: Any, leave: Event) -> None:
    uvloop.run(_publish(urls, offset, ready, go, results, leave))


async def _publish(urls: int, offset: int, ready: Any, go: Event, results: Any, leave: Event) -> None:
    """Publish `urls` bench URLs through crawler.publisher x16 into a vhost of its own, on `go`."""
    spec = SiteSpec()
    config = parse_config(yaml.safe_dump(crawler_config(spec)), "bench")
    with services.vhost() as amqp_url, services.key_prefix("brokerbench") as prefix:
        settings = Settings(amqp_url=amqp_url, redis_url=services.REDIS_URL, prefix=prefix)
        async with frontier(settings, "bench broker") as f:
            channel = await f.connection.channel(publisher_confirms=True)
            await declare(channel, topology(config, settings.names))
            exchange = await channel.get_exchange(settings.names.frontier, ensure=False)
            send = router._through(Publisher(exchange))
            batches = list(reversed(router._batches(spec, offset, urls)))
            ready.put(os.getpid())
            await asyncio.to_thread(go.wait)
            sent = 0

            async def worker() -> None:
                nonlocal sent
                while batches:
                    done = await send(batches.pop())
                    sent += done

            await asyncio.gather(*(worker() for _ in range(16)))
            results.put(sent)
            await asyncio.to_thread(leave.wait)
            await channel.close()


def broker_ceiling(processes: int, urls: int, background: float) -> Broker:
    """`processes` publishers set up, then started together; the broker's CPU while they publish."""
    ctx = multiprocessing.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go, leave = ctx.Event(), ctx.Event()
    procs = [
        ctx.Process(target=_publisher, args=(urls, n * urls, ready, go, results, leave))
        for n in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            ready.get(timeout=120)
        before, started = service_cpu()["rabbitmq"], time.monotonic()
        go.set()
        sent = sum(results.get(timeout=600) for _ in procs)
        seconds, after = time.monotonic() - started, service_cpu()["rabbitmq"]
        return Broker(processes, sent, seconds, after - before, background)
    except queue.Empty:
        raise SystemExit("bench: a publisher did not answer; see its output above") from None
    finally:
        leave.set()
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
                p.join()


def broker_table(rows: Sequence[Broker]) -> str:
    """The broker's publish ceiling with more publishers."""
    head = (
        "publishers",
        "publishes",
        "seconds",
        "publish/s",
        "x 1 publisher",
        "rabbit cores",
        "rabbit ms/pub",
    )
    body = [
        (
            str(b.processes),
            str(b.publishes),
            f"{b.seconds:.2f}",
            f"{b.rate:.0f}",
            f"{b.rate / rows[0].rate:.2f}",
            f"{b.rabbitmq_cpu / b.seconds:.2f}",
            f"{b.ms_per_publish:.3f}",
        )
        for b in rows
    ]
    return "\n".join(_columns([head, *body]))


# -- the projection -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Costs:
    """The measured figures the projection rests on."""

    consumer_ms: float  # crawler CPU per page, 2 consumers
    one_consumer_rate: float  # pages/s of a single consumer process
    rabbitmq_ms: float  # broker CPU per page (publish, delivery, ack)
    redis_ms: float
    urls_per_page: float  # URLs that enter the dedup store per page fetched
    store_bytes: dict[str, float]  # mode -> B/URL at the largest size
    db_bytes: float  # SQLite bytes per page stored
    router_rate: float | None  # route x16, publishes/s of one process
    broker_rate: float | None  # the most publishes/s measured from several processes
    broker_ms: float | None  # broker CPU per confirmed publish


def projection(c: Costs, per_day: int = PAGES_PER_DAY) -> str:
    """What a fleet needs for `per_day` pages a day, with the arithmetic."""
    rate = per_day / 86_400
    lines = [f"{per_day:,} pages a day = {per_day:,} / 86,400 s = {rate:,.0f} pages/s on average"]
    cores = rate * c.consumer_ms / 1000
    procs = rate / c.one_consumer_rate
    lines.append(
        f"consumers: {rate:,.0f} pages/s x {c.consumer_ms:.2f} CPU-ms/page = {cores:.2f} cores; one "
        f"process did {c.one_consumer_rate:.0f} pages/s, so {rate:,.0f} / {c.one_consumer_rate:.0f} = "
        f"{procs:.1f} -> {math.ceil(procs)} processes at full speed, {math.ceil(procs / 0.7)} at 70 % "
        f"(one core each)"
    )
    broker = rate * c.rabbitmq_ms / 1000
    lines.append(
        f"broker: {rate:,.0f} x {c.rabbitmq_ms:.2f} ms/page = {broker:.2f} cores of RabbitMQ "
        "(each page: ~1 publish, 1 delivery, 1 ack); one node does it"
        + (
            f" (publish ceiling measured {c.broker_rate:,.0f}/s, {c.broker_ms:.3f} ms/publish: "
            f"{c.broker_rate / rate:.1f}x the need)"
            if c.broker_rate and c.broker_ms
            else ""
        )
        + "; 3 nodes for availability (quorum queues cost more per message: not measured here)"
    )
    if c.router_rate:
        lines.append(
            f"router: {rate * c.urls_per_page:,.0f} publishes/s needed "
            f"({c.urls_per_page:.2f} per page) vs {c.router_rate:,.0f}/s from one process at x16"
        )
    urls = per_day * c.urls_per_page
    lines.append(
        f"redis: {rate:,.0f} x {c.redis_ms:.2f} ms/page = {rate * c.redis_ms / 1000:.2f} cores; the dedup "
        f"store gains {per_day:,} x {c.urls_per_page:.2f} = {urls:,.0f} URLs a day:"
    )
    for mode, per_url in c.store_bytes.items():
        lines.append(
            f"  {mode:<8} {urls:,.0f} x {per_url:.2f} B = {urls * per_url / 1e9:.2f} GB per day of crawl"
        )
    lines.append(
        f"database: {rate:,.0f} rows/s; x {c.db_bytes / 1000:.1f} kB/page (SQLite file) = "
        f"{rate * c.db_bytes / 1e6:.1f} MB/s, {per_day * c.db_bytes / 1e9:,.0f} GB a day; "
        f"in group commits of <= 64 rows, >= {rate / 64:.0f} commits/s across the fleet"
    )
    return "\n".join(lines)


def costs(
    crawls: Sequence[Crawl], growth: Sequence[Growth], router_rate: float | None, brokers: Sequence[Broker]
) -> Costs | None:
    """The projection's inputs from what was measured, or None if a needed crawl is missing."""
    two = [c for c in crawls if c.case.series == "processes" and c.case.processes == 2]
    one = [c for c in crawls if c.case.series == "processes" and c.case.processes == 1]
    if not two or not one:
        return None

    def mean(values: Sequence[float | None]) -> float:
        known = [v for v in values if v is not None]
        return sum(known) / len(known)

    sized = [g for g in growth if g.capacity == min(x.capacity for x in growth)]
    best = max(brokers, key=lambda b: b.rate, default=None)
    return Costs(
        consumer_ms=mean([c.result.ms_per_page(TOOL) for c in two]),
        one_consumer_rate=mean([c.result.pages_per_s for c in one]),
        rabbitmq_ms=mean([c.result.ms_per_page("rabbitmq") for c in two]),
        redis_ms=mean([c.result.ms_per_page("redis") for c in two]),
        urls_per_page=mean([c.store_urls / c.result.pages for c in two if c.result.pages]),
        store_bytes={g.mode: g.sizes[-1][1] / g.sizes[-1][0] for g in sized},
        db_bytes=mean([c.db_bytes / c.result.pages for c in two if c.result.pages]),
        router_rate=router_rate,
        broker_rate=best.rate if best else None,
        broker_ms=best.ms_per_publish if best else None,
    )


# -- main -----------------------------------------------------------------------------------------


def _sizes(value: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in value.split(","))
    except ValueError:
        sizes = ()
    if len(sizes) != 3 or any(n % 4 for n in sizes) or not sizes[0] < sizes[1] < sizes[2]:
        raise argparse.ArgumentTypeError(f"--sizes wants three growing multiples of 4, got {value!r}")
    return sizes


def _series(value: str) -> list[str]:
    chosen = [s.strip() for s in value.split(",") if s.strip()]
    unknown = [s for s in chosen if s not in SERIES]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"series are {', '.join(SERIES)}, comma-separated")
    return chosen


@contextmanager
def _section(title: str) -> Iterator[None]:
    print(f"\n== {title} ({datetime.now():%H:%M:%S}, load {os.getloadavg()[0]:.1f})", flush=True)
    yield


def main(argv: Sequence[str] | None = None) -> None:
    """Run the chosen series and print their tables and the projection."""
    parser = argparse.ArgumentParser(prog="python -m bench.scaling", description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20_000, help="pages of the processes and domains crawls")
    parser.add_argument(
        "--only", type=_series, default=list(SERIES), help="comma-separated: " + ",".join(SERIES)
    )
    parser.add_argument("--repeat", type=int, default=1, help="run the processes and domains series R times")
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default=SIZES,
        help="three site sizes, the last seeded into the store (default 5000,50000,500000)",
    )
    parser.add_argument("--port", type=int, default=PORT, help="where nginx serves (default %(default)s)")
    parser.add_argument("--mode", default="plain", help="dedup mode of the crawls (default %(default)s)")
    parser.add_argument("--publishes", type=int, default=20_000, help="per way and per publisher process")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-scaling"), help="sites and logs")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds one crawl may take")
    parser.add_argument("--stall", type=float, default=120, help="seconds without progress before a kill")
    args = parser.parse_args(argv)
    if args.pages % 400:
        parser.error("--pages must be a multiple of 400 (it is split over 4, 40 and 400 domains)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = args.work / datetime.now().strftime("run-%Y%m%d-%H%M%S")
    print(f"python -m bench.scaling {' '.join(argv if argv is not None else sys.argv[1:])}; logs in {run}")
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; {background()}")
    crawls: dict[str, list[Crawl]] = {}
    capacity = max(max(args.sizes), MIN_CAPACITY)  # the stores are sized for the largest
    titles = {
        "processes": ("consumers", lambda c: f"{c.case.processes} consumer(s), 4 x {c.case.pages}"),
        "domains": ("domains", lambda c: f"{c.case.domains} domains x {c.case.pages}, 2 consumers"),
        "size": (
            "site size",
            lambda c: (
                f"{c.case.domains * c.case.pages:,} pages"
                + (f" + {c.case.seeded:,} seeded" if c.case.seeded else "")
            ),
        ),
    }
    for series in ("processes", "domains", "size"):
        if series not in args.only:
            continue
        todo = [replace(c, port=args.port) for c in cases(series, args.pages, args.sizes)]
        todo *= args.repeat if series != "size" else 1
        with _section(f"{titles[series][0]}: {len(todo)} crawls"):
            done = []
            for case in todo:
                print(f"  {case.label} ...", flush=True)
                done.append(crawl(case, args.work, run, args.timeout, args.stall, args.mode, capacity))
                r = done[-1].result
                print(
                    f"    {r.pages} pages, {r.pages_per_s:.1f} pages/s, {r.ms_per_page(TOOL) or 0:.2f} ms/p"
                )
            crawls[series] = done
            print(crawl_table(done, titles[series][1]))
        if series == "size":
            print(rss_course(max(done, key=lambda c: c.result.expected)))
    growth: list[Growth] = []
    if "dedup" in args.only:
        with _section("dedup store as it grows (claimed and confirmed through crawler.dedup)"):
            growth = grow(("plain", "compact", "bloom"), (capacity, 10_000_000), args.sizes)
            print(growth_table(growth))
    router_rate, brokers = None, []
    if "ceilings" in args.only:
        with _section("router: bench.router's ways"):
            others = router.background()
            measured = uvloop.run(router.bench(args.publishes))
            print(router.HEADER)
            for m in measured:
                print(m.row(others["rabbitmq"]))
            router_rate = next(m.publishes / m.seconds for m in measured if m.label == "route x16")
        with _section("broker: confirmed persistent publishes from several processes at once"):
            others = router.background()
            brokers = [broker_ceiling(n, args.publishes, others["rabbitmq"]) for n in (1, 2, 3)]
            print(broker_table(brokers))
    inputs = costs([c for done in crawls.values() for c in done], growth, router_rate, brokers)
    if inputs is not None:
        with _section("projection: 100 million pages a day"):
            print(projection(inputs))


if __name__ == "__main__":
    main()
