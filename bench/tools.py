"""The three tools on the bench site, each from a clean state, measured the same way.

A run's clock starts when its first process is launched and stops at the last page stored (the
tool's own timestamp on it), so the idle time a tool spends noticing it is done is left out of pages/s
but not out of its CPU time.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import redis
import yaml

from bench import services
from bench.nginx import Nginx
from bench.procs import Child, service_cpu, total_cpu
from bench.site import SiteSpec
from crawler.names import Names

SAMPLE_EVERY = 0.5  # seconds between progress and RSS samples
TOOL = "tool"  # the CPU kind of the measured tool's own processes
NGINX = "nginx"


@dataclass(slots=True)
class Result:
    """One tool's run."""

    tool: str
    processes: int
    expected: int
    pages: int = 0  # distinct pages fetched, parsed and stored
    seconds: float = 0.0  # launch to last page stored
    exit_seconds: float = 0.0  # launch to the last process's exit
    cpu: dict[str, float] = field(default_factory=dict)  # kind -> CPU seconds during the run
    peak_rss_mb: float = 0.0  # the largest of the tool's processes
    rss_early_mb: float | None = None  # the main processes' largest RSS at 10 % of the pages
    rss_end_mb: float | None = None  # ... and at the last sample before they exited
    notes: list[str] = field(default_factory=list)
    profiles: list[Path] = field(default_factory=list)  # py-spy's collapsed stacks, if profiled
    threads: list[tuple[float, float]] = field(default_factory=list)  # per main process: main, others

    @property
    def pages_per_s(self) -> float:
        """Pages per second, launch to last page."""
        return self.pages / self.seconds if self.seconds > 0 else 0.0

    def ms_per_page(self, kind: str) -> float | None:
        """CPU milliseconds per page of one kind of process."""
        if kind not in self.cpu or not self.pages:
            return None
        return 1000 * self.cpu[kind] / self.pages


@dataclass(slots=True)
class Bench:
    """What every tool shares: the site, nginx serving it, where runs write, how long runs may take."""

    spec: SiteSpec
    nginx: Nginx
    work: Path
    timeout: float
    stall: float = 120.0  # seconds without a new page before a run is called stuck
    profile: bool = False

    @property
    def host_ports(self) -> str:
        """The bench hosts as host:port, comma-separated."""
        return ",".join(f"{h}:{self.spec.port}" for h in self.spec.hosts)


Progress = Callable[[], int]


def _watch(
    bench: Bench, result: Result, started: float, children: Sequence[Child], progress: Progress
) -> None:
    """Sample progress and RSS until every child exits or the run times out."""
    deadline = started + bench.timeout
    last_done, last_change = -1, time.monotonic()
    while any(c.poll() for c in children):
        now = time.monotonic()
        done = progress()
        if done != last_done:
            last_done, last_change = done, now
        stalled = now - last_change > bench.stall
        if now > deadline or stalled:
            why = (
                f"no progress for {bench.stall:.0f}s" if stalled else f"timed out after {bench.timeout:.0f}s"
            )
            result.notes.append(f"{why} at {done} pages: killed")
            for c in children:
                c.kill()
            break
        for c in children:
            c.sample(done)
        time.sleep(SAMPLE_EVERY)
    for c in children:
        c.wait()
        if c.proc.returncode:
            result.notes.append(f"{c.name} exited with {c.proc.returncode}")


@contextmanager
def _measured(bench: Bench, result: Result) -> Iterator[list[Child]]:
    """Account the CPU of the shared services and nginx, and of the children the block starts."""
    children: list[Child] = []
    services_before = service_cpu()
    nginx_before = total_cpu(bench.nginx.pids())
    try:
        yield children
    finally:
        for c in children:
            c.kill()
        services_after = service_cpu()
        result.cpu[TOOL] = sum(c.cpu for c in children)
        result.cpu.update({k: services_after[k] - services_before[k] for k in services_after})
        result.cpu[NGINX] = total_cpu(bench.nginx.pids()) - nginx_before
        result.peak_rss_mb = max((c.peak_rss_mb for c in children), default=0.0)


def _memory(result: Result, main: Sequence[Child]) -> None:
    early = [m for c in main if (m := c.rss_at(result.expected // 10)) is not None]
    last = [c.rss[-1][1] for c in main if c.rss]
    result.rss_early_mb = max(early, default=None)
    result.rss_end_mb = max(last, default=None)


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


# -- Scrapy and scrapy-redis ----------------------------------------------------------------------


def _count_lines(paths: Sequence[Path]) -> Progress:
    offsets = dict.fromkeys(paths, 0)
    counts = dict.fromkeys(paths, 0)

    def count() -> int:
        for p in paths:
            if p.exists():
                with p.open("rb") as f:
                    f.seek(offsets[p])
                    chunk = f.read()
                # Only whole lines: the exporter may have flushed half of one.
                whole = chunk[: chunk.rfind(b"\n") + 1]
                counts[p] += whole.count(b"\n")
                offsets[p] += len(whole)
        return sum(counts.values())

    return count


def _scrapy_items(result: Result, paths: Sequence[Path], started_at: float) -> None:
    urls: set[str] = set()
    priced = 0
    last = started_at
    items = 0
    for p in paths:
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            item = json.loads(line)
            items += 1
            urls.add(item["url"])
            priced += item.get("price") is not None
            last = max(last, item["t"])
    result.pages = len(urls)
    result.seconds = last - started_at
    if items != len(urls):
        result.notes.append(f"{items - len(urls)} pages fetched twice (start URLs bypass the dupefilter)")
    if priced < items:
        result.notes.append(f"{items - priced} items without a price")


def run_scrapy(bench: Bench) -> Result:
    """Plain Scrapy, one process."""
    out = bench.work / "scrapy"
    out.mkdir(parents=True, exist_ok=True)
    items = out / "items.jsonl"
    result = Result("scrapy", 1, bench.spec.total)
    with _measured(bench, result) as children, (out / "stdout.log").open("wb") as log:
        started, started_at = time.monotonic(), time.time()
        argv = _python(
            "-m", "bench.scrapy_spider", "scrapy", "--hosts", bench.host_ports,
            "--start", ",".join(bench.spec.index_urls()),
            "--items", str(items), "--log", str(out / "scrapy.log"),
        )  # fmt: skip
        children.append(Child.start("scrapy", argv, _env(), log))
        _watch(bench, result, started, children, _count_lines([items]))
        result.exit_seconds = time.monotonic() - started
    _scrapy_items(result, [items], started_at)
    _memory(result, children)
    return result


def run_scrapy_redis(bench: Bench, processes: int) -> Result:
    """scrapy-redis, `processes` processes sharing a Redis scheduler and dupefilter."""
    out = bench.work / f"scrapy-redis-{processes}"
    out.mkdir(parents=True, exist_ok=True)
    result = Result("scrapy-redis", processes, bench.spec.total)
    items = [out / f"items-{i}.jsonl" for i in range(processes)]
    with ExitStack() as stack:
        prefix = stack.enter_context(services.key_prefix("scrapybench"))
        client = redis.Redis.from_url(services.REDIS_URL)
        try:
            client.rpush(f"{prefix}:start_urls", *(json.dumps({"url": u}) for u in bench.spec.index_urls()))
        finally:
            client.close()
        children = stack.enter_context(_measured(bench, result))
        started, started_at = time.monotonic(), time.time()
        for i in range(processes):
            log = stack.enter_context((out / f"stdout-{i}.log").open("wb"))
            argv = _python(
                "-m", "bench.scrapy_spider", "redis", "--hosts", bench.host_ports, "--items", str(items[i]),
                "--log", str(out / f"scrapy-{i}.log"), "--redis-url", services.REDIS_URL, "--prefix", prefix,
            )  # fmt: skip
            children.append(Child.start(f"scrapy-redis {i}", argv, _env(), log))
        _watch(bench, result, started, children, _count_lines(items))
        result.exit_seconds = time.monotonic() - started
    _scrapy_items(result, items, started_at)
    _memory(result, children)
    return result


# -- the crawler ----------------------------------------------------------------------------------


def crawler_config(spec: SiteSpec) -> dict[str, object]:
    """domains.yaml for the bench: the hosts' IPs as domains, limits out of the way."""
    return {
        "defaults": {
            "prefetch": 16,
            "rate": 100_000,
            "burst": 100_000,
            "max_depth": 50,
            "max_pages": 10_000_000,
            "obey_robots": False,
            "extract": {"title": "h1", "price": ".price"},
        },
        "allow_private_networks": True,
        "domains": {host: {} for host in spec.hosts},
    }


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", **extra}


def _script(name: str) -> list[str]:
    # The console script installed beside this Python, as a user runs it.
    script = Path(sys.executable).with_name(name)
    if script.exists():
        return [str(script)]
    func = {"crawler": "crawler", "crawler-consume": "consume"}[name]
    return _python("-c", f"import sys; from crawler.launch import {func}; sys.exit({func}())")


def _db_progress(db: Path) -> Progress:
    def count() -> int:
        if not db.exists():
            return 0
        try:
            with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)) as conn:
                row = conn.execute("SELECT max(rowid) FROM pages").fetchone()
        except sqlite3.Error:
            return 0
        return int(row[0] or 0)

    return count


def _crawler_pages(result: Result, db: Path, started_at: float) -> None:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        total, ok, priced, last = conn.execute(
            "SELECT count(*), sum(error IS NULL AND status_code = 200),"
            " sum(json_extract(data, '$.price') IS NOT NULL), max(fetched_at) FROM pages"
        ).fetchone()
    result.pages = int(ok or 0)
    if last:
        # Stored as naive UTC: the time the fetch began, close enough to when the page was done.
        stored = datetime.fromisoformat(last).replace(tzinfo=UTC).timestamp()
        result.seconds = stored - started_at
    if total != ok:
        result.notes.append(f"{total - (ok or 0)} pages failed")
    if (priced or 0) < (ok or 0):
        result.notes.append(f"{(ok or 0) - (priced or 0)} pages without a price")


def _pg_progress(url: str) -> Progress:
    def count() -> int:
        try:
            with psycopg.connect(url, connect_timeout=1) as conn:
                row = conn.execute("SELECT max(id) FROM pages").fetchone()
        except psycopg.Error:
            return 0
        return int(row[0] or 0) if row else 0

    return count


def _pg_pages(result: Result, url: str, started_at: float) -> None:
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE error IS NULL AND status_code = 200),"
            " count(*) FILTER (WHERE data->>'price' IS NOT NULL), max(fetched_at) FROM pages"
        ).fetchone()
    assert row is not None
    total, ok, priced, last = row
    result.pages = int(ok or 0)
    if last is not None:
        result.seconds = last.timestamp() - started_at
    if total != ok:
        result.notes.append(f"{total - (ok or 0)} pages failed")
    if (priced or 0) < (ok or 0):
        result.notes.append(f"{(ok or 0) - (priced or 0)} pages without a price")


def crawler_env(
    stack: ExitStack, config: Path, db: Path, label: str, database_url: str | None = None
) -> dict[str, str]:
    """The environment for crawler commands: a fresh vhost, key prefix and migrated database (the
    SQLite file `db`, unless `database_url` names another)."""
    db.unlink(missing_ok=True)
    env = _env(
        CRAWLER_AMQP_URL=stack.enter_context(services.vhost()),
        CRAWLER_REDIS_URL=services.REDIS_URL,
        CRAWLER_DATABASE_URL=database_url or f"sqlite:///{db}",
        CRAWLER_CONFIG=str(config),
        CRAWLER_PREFIX=stack.enter_context(services.key_prefix(label)),
    )
    setup = db.parent / "setup.log"
    with setup.open("wb") as log:
        if Child.start("db upgrade", [*_script("crawler"), "db", "upgrade"], env, log).wait():
            raise SystemExit(f"bench: `crawler db upgrade` failed, see {setup}")
    return env


SINKS = ("sqlite", "postgresql")


def run_crawler(bench: Bench, processes: int, sink: str = "sqlite") -> Result:
    """`crawler seed` the index pages, then `processes` x `crawler-consume --burst`, storing into
    `sink`: a SQLite file, or a fresh PostgreSQL database on the shared server."""
    suffix = "" if sink == "sqlite" else "-pg"
    out = bench.work / f"crawler-{processes}{suffix}"
    out.mkdir(parents=True, exist_ok=True)
    result = Result(f"crawler{suffix}", processes, bench.spec.total)
    db = out / "crawl.db"
    config = out / "domains.yaml"
    config.write_text(yaml.safe_dump(crawler_config(bench.spec)))
    with ExitStack() as stack:
        pg = stack.enter_context(services.database()) if sink == "postgresql" else None
        env = crawler_env(stack, config, db, "crawlerbench", pg)
        children = stack.enter_context(_measured(bench, result))
        started, started_at = time.monotonic(), time.time()
        consumers = seed_and_consume(bench, result, stack, children, env, out, processes)
        if bench.profile:
            result.profiles.append(stack.enter_context(_profiled(consumers[0], out)))
        _watch(bench, result, started, consumers, _pg_progress(pg) if pg else _db_progress(db))
        result.exit_seconds = time.monotonic() - started
        routed = _seen_count(Names(env["CRAWLER_PREFIX"], _crawl_id(out / "seed.log")).seen_key)
        if routed != bench.spec.total:
            result.notes.append(f"{routed} URLs routed, expected {bench.spec.total}")
        if pg:
            _pg_pages(result, pg, started_at)
    if not pg:
        _crawler_pages(result, db, started_at)
    result.notes += _ack_delays(out, processes)
    _memory(result, consumers)
    result.threads = [c.thread_split() for c in consumers]
    return result


def seed_and_consume(
    bench: Bench,
    result: Result,
    stack: ExitStack,
    children: list[Child],
    env: dict[str, str],
    out: Path,
    processes: int,
) -> list[Child]:
    """`crawler seed` the index pages (waited for), then start `processes` x `crawler-consume --burst`."""
    log = stack.enter_context((out / "seed.log").open("wb"))
    seed = Child.start("seed", [*_script("crawler"), "seed", *bench.spec.index_urls()], env, log)
    children.append(seed)
    if seed.wait():
        result.notes.append(f"crawler seed exited with {seed.proc.returncode}, see {out / 'seed.log'}")
    consumers = []
    for i in range(processes):
        log = stack.enter_context((out / f"consume-{i}.log").open("wb"))
        consumers.append(Child.start(f"consume {i}", [*_script("crawler-consume"), "--burst"], env, log))
    children.extend(consumers)
    return consumers


def _ack_delays(out: Path, processes: int) -> list[str]:
    """Each consumer's own account, as it logged when it stopped, of how soon it acked once done."""
    notes = []
    for i in range(processes):
        log = out / f"consume-{i}.log"
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        acked = [line for line in lines if line.startswith("acked: ")]
        notes.append(f"consume {i} {acked[-1] if acked else 'logged no ack delays'}")
    return notes


def _crawl_id(seed_log: Path) -> str | None:
    """The crawl id `crawler seed` printed last (its dedup store is the crawl's own)."""
    lines = seed_log.read_text().split() if seed_log.exists() else []
    return lines[-1] if lines else None


def _seen_count(key: str) -> int:
    client = redis.Redis.from_url(services.REDIS_URL)
    try:
        return int(client.hlen(key))
    finally:
        client.close()


@contextmanager
def _profiled(target: Child, out: Path) -> Iterator[Path]:
    """Sample `target` with py-spy while it runs; the collapsed stacks land in `out`."""
    beside = Path(sys.executable).with_name("py-spy")
    spy_bin = str(beside) if beside.exists() else "py-spy"
    time.sleep(1.0)  # let the interpreter start before attaching
    raw = out / f"profile-{target.pid}.txt"
    with (out / "py-spy.log").open("wb") as log:
        spy = subprocess.Popen(
            [spy_bin, "record", "--nonblocking", "--format", "raw", "--rate", "100",
             "--output", str(raw), "--pid", str(target.pid)],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            yield raw
        finally:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.terminate()
                spy.wait()
