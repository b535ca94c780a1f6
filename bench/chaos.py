"""Randomized faults, replayable: the soak's sites crawled while a seeded schedule of faults hits the
workers, the broker, Redis, PostgreSQL, the network and the archive's disk; each run checked.

python -m bench.chaos --runs N --seed S [--pages 60] [--faults 6] [--only kill,broker,...]

Every run prints its schedule first (run i's is drawn from "S:i" alone: `--seed S --first i --runs 1`
replays it), then its checks:
- the ledger (bench/ledger.py): every URL the crawl discovered is a row, a message in some queue or
  a dead letter; a lost one is named with its last trace line;
- versions: each page stored has exactly one version (a first crawl), and the change feed carried
  each version at least once (copies are counted: redeliveries announce again);
- politeness, from the sites' own request logs: the most requests a host got in any second, against
  its rate and burst;
- attempts: the most requests any page took, and the most attempts any row records.

Every broker, Redis and PostgreSQL fault goes to instances this bench starts for itself (a private
RabbitMQ node with its management API, a redis-server, a PostgreSQL cluster), never the shared ones.
One worker runs in a network namespace (bench/netns.py), cut off now and then; the archive is a
small tmpfs filled up now and then. Both need root; without it those faults are left out (said so).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import aio_pika
import httpx
import psycopg
import yaml

from bench import nginx
from bench.ledger import Ledger, take
from bench.netns import Netns, namespace, unusable
from bench.node import Node, private_node
from bench.postgres import PrivatePostgres, private_postgres
from bench.procs import Child
from bench.redis_server import PrivateRedis
from bench.site import SiteSpec, write
from bench.tools import _script, crawler_config
from crawler.config import load_config
from crawler.names import Names
from demo.site import free_port

FAULTS = {
    "kill": "a worker SIGKILLed (started again at once)",
    "stop": "a worker SIGSTOPped for a few seconds, then SIGCONT",
    "broker": "RabbitMQ restarted (its application: queues and persistent messages stay)",
    "close": "every connection closed by the broker (management API)",
    "redis-empty": "Redis restarted empty",
    "redis-kept": "Redis restarted with what it held",
    "postgres": "PostgreSQL crashed and started again",
    "cut": "the worker in a network namespace cut off for a while",
    "disk": "the archive's disk full for a while",
}
NEEDS_ROOT = ("cut", "disk")
RETRY_DELAYS = [0.5, 1, 2, 4, 8, 8]
ARCHIVE_DISK = "16m"
POLL = 0.25  # seconds between looks at the crawl's progress
STALLED = 60.0  # seconds without a page stored after which a run with nothing left anywhere is over
DRAIN = 60.0  # seconds workers get to drain on SIGTERM


@dataclass(frozen=True, slots=True)
class Fault:
    """One fault of a run's schedule: what, when (a share of the pages stored), on which worker, how long."""

    at: float
    kind: str
    worker: int = 0
    seconds: float = 0.0

    def text(self) -> str:
        """How the schedule prints it."""
        who = f" w{self.worker}" if self.kind in ("kill", "stop") else ""
        long = f" {self.seconds:.0f}s" if self.seconds else ""
        return f"{self.kind}{who}{long} @{self.at:.0%}"


def plan(rng: random.Random, count: int, workers: int, kinds: Sequence[str]) -> list[Fault]:
    """A run's faults, drawn from `rng` alone: the same seed, the same schedule."""
    faults = []
    for _ in range(count):
        kind = rng.choice(list(kinds))
        seconds = {"stop": rng.uniform(2, 15), "cut": rng.uniform(5, 25), "disk": rng.uniform(2, 10)}
        faults.append(
            Fault(round(rng.uniform(0.05, 0.9), 3), kind, rng.randrange(workers), seconds.get(kind, 0.0))
        )
    return sorted(faults, key=lambda f: f.at)


@dataclass(frozen=True, slots=True)
class Options:
    """How many runs, how big, how hard."""

    runs: int = 50
    seed: int = 1
    first: int = 0  # the first run's index: `--first i --runs 1` replays run i
    pages: int = 60  # per host
    hosts: int = 4
    workers: int = 3  # the first one in a network namespace, where that can be made
    faults: int = 6  # per run
    rate: float = 4.0  # pages/s per host
    prefetch: int = 4
    kinds: tuple[str, ...] = tuple(FAULTS)
    timeout: float = 900.0  # seconds a run may take before it counts as failed
    work: Path = Path("/tmp/crawler-chaos")


@dataclass(slots=True)
class Result:
    """What one run showed."""

    index: int
    schedule: list[Fault]
    run_dir: Path
    completed: bool = False
    seconds: float = 0.0
    expected: int = 0
    stored: int = 0
    ledger: Ledger = field(default_factory=Ledger)
    refetches: int = 0  # requests for a page beyond its first
    most_requests: int = 0  # the most requests one page took
    most_attempts: int = 0  # the most attempts a row records
    versions_wrong: list[str] = field(default_factory=list)  # pages without exactly one version
    feed_missing: list[str] = field(default_factory=list)  # versions the feed never carried
    feed_copies: int = 0  # feed messages beyond the first of each version
    busiest: dict[str, int] = field(default_factory=dict)  # host -> most requests in any second
    limit: int = 0  # what the rate and burst allow in a second
    notes: list[str] = field(default_factory=list)

    @property
    def polite(self) -> bool:
        """No host asked more often than its rate and burst allow."""
        return all(n <= self.limit for n in self.busiest.values())

    @property
    def ok(self) -> bool:
        """Nothing lost, every page stored once with one version, each carried by the feed."""
        return self.completed and self.ledger.ok and not self.versions_wrong and not self.feed_missing

    def text(self) -> str:
        """Its lines in the printed report."""
        busiest = max(self.busiest.values(), default=0)
        head = (
            f"run {self.index}: {'OK' if self.ok else 'FAILED'} in {self.seconds:.0f}s: "
            f"{self.stored}/{self.expected} pages stored, lost {self.ledger.lost}, "
            f"refetches {self.refetches}, feed copies {self.feed_copies}, "
            f"most requests per page {self.most_requests}, most attempts {self.most_attempts}, "
            f"busiest second {busiest} (limit {self.limit}{'' if self.polite else ', EXCEEDED'})"
        )
        lines = [head, "  " + self.ledger.text().replace("\n", "\n  ")]
        if self.versions_wrong:
            lines.append(f"  pages without exactly one version: {self.versions_wrong[:10]}")
        if self.feed_missing:
            lines.append(f"  versions the feed never carried: {self.feed_missing[:10]}")
        lines += [f"  note: {n}" for n in self.notes]
        if not self.ok:
            lines.append(f"  run directory (kept): {self.run_dir}")
        return "\n".join(lines)


@dataclass
class Services:
    """The private instances every run of one invocation shares (each run its own names in them)."""

    node: Node
    redis: PrivateRedis
    pg: PrivatePostgres
    ns: Netns | None


@contextmanager
def services(work: Path, kinds: Sequence[str]) -> Iterator[Services]:
    """Start a private RabbitMQ node (management API on), redis-server and PostgreSQL cluster, and a
    network namespace if `cut` is wanted; all stopped after."""
    with ExitStack() as stack:
        node = stack.enter_context(private_node(work / "rabbitmq", "crawler-chaos", management=True))
        (work / "redis").mkdir(parents=True, exist_ok=True)
        redis = PrivateRedis(work / "redis")
        redis.start()
        stack.callback(redis.stop)
        pg = stack.enter_context(private_postgres())
        ns = stack.enter_context(namespace()) if "cut" in kinds else None
        _management_ready(node)
        yield Services(node, redis, pg, ns)


def _management_ready(node: Node, within: float = 120.0) -> None:
    deadline = time.monotonic() + within
    while True:
        try:
            if httpx.get(
                f"{node.management_url}/api/overview", auth=("guest", "guest"), timeout=5
            ).is_success:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"chaos: {node.name}'s management API did not answer in {within:g}s")
        time.sleep(0.5)


def _through(ns: Netns, url: str) -> str:
    """`url` as a process in the namespace reaches it: through a relay on the veth's host end."""
    parts = urlsplit(url)
    host, port = ns.expose(parts.hostname or "127.0.0.1", parts.port or 0)
    auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{auth}{host}:{port}"))


class Worker:
    """One crawler-consume process of the run, started again after a kill (in its namespace, if any)."""

    def __init__(self, index: int, env: dict[str, str], logs: Path, ns: Netns | None) -> None:
        self.index = index
        self.env = env
        self.logs = logs
        self.ns = ns
        self.lives = 0
        self.child: Child | None = None

    def start(self) -> None:
        self.lives += 1
        argv = [*_script("crawler-consume"), "--trace"]
        if self.ns is not None:
            argv = self.ns.command(argv)
        with (self.logs / f"worker-{self.index}-{self.lives}.log").open("wb") as log:
            self.child = Child.start(f"worker {self.index}", argv, self.env, log)

    def signal(self, sig: signal.Signals) -> None:
        if self.child is not None and self.child.running:
            os.kill(self.child.pid, sig)

    def kill(self) -> None:
        if self.child is not None:
            self.signal(signal.SIGCONT)
            self.child.kill()

    def stop(self) -> int | None:
        """SIGTERM (a drain), killed past DRAIN; its exit code (None: killed)."""
        child = self.child
        if child is None or not child.running:
            return child.proc.returncode if child else None
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + DRAIN
        while child.poll() and time.monotonic() < deadline:
            time.sleep(0.2)
        if child.running:
            child.kill()
            return None
        return child.proc.returncode


class Run:
    """One run: its site, names, workers and faults."""

    def __init__(self, options: Options, svc: Services, index: int, schedule: list[Fault]) -> None:
        self.options = options
        self.svc = svc
        self.index = index
        self.schedule = schedule
        self.dir = options.work / f"run-{index:03d}-{time.strftime('%H%M%S')}"
        self.logs = self.dir / "logs"
        self.logs.mkdir(parents=True)
        self.prefix = f"chaos{index}x{random.randrange(1 << 30):x}"
        self.database = f"chaos_{self.prefix}"
        self.result = Result(index, schedule, self.dir)
        self.archive: Path | None = None
        self._busy: list[threading.Thread] = []

    def database_url(self) -> str:
        return self.svc.pg.url(self.database)

    def stored(self) -> int:
        """Pages stored with a 200; what it last was if the database is away."""
        try:
            with psycopg.connect(self.database_url(), connect_timeout=2) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pages WHERE status_code = 200 AND error IS NULL"
                ).fetchone()
                return int(row[0]) if row else 0
        except psycopg.Error:
            return -1

    def nothing_left(self) -> bool:
        """No message of the run's in any queue (ready or unacked), nor a fault under way: whatever is
        not stored by now never will be (the ledger says what became of it)."""
        if any(thread.is_alive() for thread in self._busy):
            return False
        try:
            with httpx.Client(
                base_url=self.svc.node.management_url, auth=("guest", "guest"), timeout=30
            ) as api:
                queues = api.get("/api/queues").json()
        except (httpx.HTTPError, ValueError):
            return False
        mine = [
            q for q in queues if q["name"].startswith(f"{self.prefix}.") and not q["name"].endswith("-feed")
        ]
        return all(int(q.get("messages", 0)) == 0 for q in mine)

    def apply(self, fault: Fault, workers: list[Worker]) -> None:
        """Inflict one fault; the long ones in a thread of their own, so the run goes on meanwhile."""
        svc, kind = self.svc, fault.kind
        print(f"    {time.strftime('%H:%M:%S')} {fault.text()}", flush=True)

        def later(action: object) -> None:
            thread = threading.Thread(target=self._guarded, args=(kind, action), daemon=True)
            thread.start()
            self._busy.append(thread)

        worker = workers[fault.worker % len(workers)]
        if kind == "kill":
            worker.kill()
            worker.start()
        elif kind == "stop":
            worker.signal(signal.SIGSTOP)

            def resume() -> None:
                time.sleep(fault.seconds)
                worker.signal(signal.SIGCONT)

            later(resume)
        elif kind == "broker":
            later(svc.node.restart_app)
        elif kind == "close":
            later(self._close_connections)
        elif kind == "redis-empty":
            later(svc.redis.restart_empty)
        elif kind == "redis-kept":
            later(svc.redis.restart_kept)
        elif kind == "postgres":
            later(lambda: svc.pg.restart("immediate"))
        elif kind == "cut" and svc.ns is not None:
            ns = svc.ns
            ns.cut()

            def mend() -> None:
                time.sleep(fault.seconds)
                ns.mend()

            later(mend)
        elif kind == "disk" and self.archive is not None:
            later(lambda: self._fill(fault.seconds))

    def _guarded(self, kind: str, action: object) -> None:
        try:
            action()  # type: ignore[operator]
        except Exception as exc:
            self.result.notes.append(f"{kind} failed: {exc}")

    def _close_connections(self) -> None:
        api = self.svc.node.management_url
        with httpx.Client(base_url=api, auth=("guest", "guest"), timeout=30) as client:
            for conn in client.get("/api/connections").json():
                name = quote(conn["name"], safe="")
                client.delete(f"/api/connections/{name}", headers={"X-Reason": "bench.chaos"})

    def _fill(self, seconds: float) -> None:
        assert self.archive is not None
        filler = self.archive / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as out:
            while True:
                out.write(b"\0" * 65536)
                out.flush()
        time.sleep(seconds)
        filler.unlink(missing_ok=True)

    def settle(self) -> None:
        """Wait for the faults still under way (a restart, a stop) to end."""
        for thread in self._busy:
            thread.join()


def _mount_archive(path: Path) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={ARCHIVE_DISK}", "tmpfs", str(path)], check=False
    )
    return done.returncode == 0


async def _feed_queue(amqp_url: str, names: Names) -> str:
    """A queue of the run's own on the change feed, bound before any version is published."""
    name = f"{names.prefix}.chaos-feed"
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(name, durable=True)
        await queue.bind(names.changes, "#")
    return name


async def _feed(amqp_url: str, queue_name: str) -> Counter[tuple[str, int]]:
    """(URL, version) of every message the feed carried."""
    seen: Counter[tuple[str, int]] = Counter()
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.get_queue(queue_name)
        while (message := await queue.get(fail=False)) is not None:
            body = json.loads(message.body)
            seen[str(body["url"]), int(body["version"])] += 1
            await message.ack()
    return seen


def _check(run: Run, spec: SiteSpec, access_log: Path, names: Names, feed_queue: str) -> None:
    result, options = run.result, run.options
    with psycopg.connect(run.database_url()) as conn:
        rows = conn.execute("SELECT url, status_code, error, attempts FROM pages").fetchall()
        versions = conn.execute(
            "SELECT p.url, count(v.id) FROM pages p"
            " LEFT JOIN page_versions v ON v.page_id = p.id GROUP BY p.url"
        ).fetchall()
        numbered = conn.execute(
            "SELECT p.url, v.version FROM page_versions v JOIN pages p ON p.id = v.page_id"
        ).fetchall()
    site = {spec.url(h, p) for h in spec.hosts for p in range(spec.pages)}
    result.stored = len({r[0] for r in rows if r[1] == 200 and r[2] is None} & site)
    result.most_attempts = max((int(r[3] or 0) for r in rows), default=0)
    result.versions_wrong = sorted(url for url, n in versions if n != 1)
    feed = asyncio.run(_feed(run.svc.node.amqp_url, feed_queue))
    result.feed_missing = sorted(f"{u} v{v}" for u, v in numbered if (u, v) not in feed)
    result.feed_copies = sum(n - 1 for n in feed.values())
    hits: Counter[str] = Counter()
    times: dict[str, list[float]] = {}
    for line in access_log.read_text().splitlines() if access_log.exists() else []:
        host, uri, _status, _size, msec = line.split(" ")[:5]
        hits[f"{host} {uri}"] += 1
        times.setdefault(host, []).append(float(msec))
    result.refetches = sum(n - 1 for n in hits.values())
    result.most_requests = max(hits.values(), default=0)
    result.busiest = {host: _busiest(sorted(t), 1.0) for host, t in times.items()}
    result.limit = int(options.rate + max(1, round(options.rate))) + 1


def _busiest(times: Sequence[float], window: float) -> int:
    most, start = 0, 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


def run_one(options: Options, svc: Services, index: int) -> Result:
    """One run: crawl the site through its schedule of faults, then check it."""
    kinds = [k for k in options.kinds if svc.ns is not None or k != "cut"]
    schedule = plan(random.Random(f"{options.seed}:{index}"), options.faults, options.workers, kinds)
    run = Run(options, svc, index, schedule)
    result = run.result
    print(
        f"run {index} (seed {options.seed}): {', '.join(f.text() for f in schedule) or 'no faults'}",
        flush=True,
    )
    spec = SiteSpec(
        pages=options.pages,
        hosts=tuple(f"127.0.0.{31 + i}" for i in range(options.hosts)),
        page_bytes=4_000,
        seed="chaos",
    )
    spec = dataclasses.replace(spec, port=free_port(*spec.hosts))
    site = write(spec, options.work / f"site-{spec.pages}x{len(spec.hosts)}-{spec.port}")
    result.expected = spec.total
    names = Names(run.prefix)
    with psycopg.connect(svc.pg.url(), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{run.database}"')
    with ExitStack() as stack:
        if "disk" in kinds:
            archive = run.dir / "archive"
            if _mount_archive(archive):
                run.archive = archive
                stack.callback(lambda: subprocess.run(["umount", "-l", str(archive)], check=False))
            else:
                result.notes.append("no tmpfs could be mounted: the disk fault is left out")
        access_log = run.dir / "requests.log"
        stack.enter_context(nginx.serve(spec, site, run.dir / "nginx", access_log=access_log))
        config = run.dir / "domains.yaml"
        domains = crawler_config(spec)
        domains["defaults"] = {
            **domains["defaults"],  # type: ignore[dict-item]
            "rate": options.rate,
            "burst": max(1, round(options.rate)),
            "prefetch": options.prefetch,
            "retry_delays": RETRY_DELAYS,
            "history": {"keep": 10},
            "archive": run.archive is not None,
        }
        config.write_text(yaml.safe_dump(domains))
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "CRAWLER_AMQP_URL": svc.node.amqp_url,
            "CRAWLER_REDIS_URL": svc.redis.url,
            "CRAWLER_DATABASE_URL": run.database_url(),
            "CRAWLER_CONFIG": str(config),
            "CRAWLER_PREFIX": run.prefix,
            "CRAWLER_ARCHIVE_DIR": str(run.archive or run.dir / "no-archive"),
        }
        for argv, name in (
            ([*_script("crawler"), "db", "upgrade"], "upgrade"),
            ([*_script("crawler"), "seed", *spec.index_urls()], "seed"),
        ):
            with (run.logs / f"{name}.log").open("wb") as log:
                if Child.start(name, argv, env, log).wait():
                    raise SystemExit(f"chaos: {name} failed, see {run.logs / name}.log")
        feed_queue = asyncio.run(_feed_queue(svc.node.amqp_url, names))
        workers = []
        for i in range(options.workers):
            ns = svc.ns if i == 0 else None
            worker_env = env
            if ns is not None:
                for ip in spec.hosts:
                    ns.route(ip)
                worker_env = {
                    **env,
                    **{
                        k: _through(ns, env[k])
                        for k in ("CRAWLER_AMQP_URL", "CRAWLER_REDIS_URL", "CRAWLER_DATABASE_URL")
                    },
                }
            workers.append(Worker(i, worker_env, run.logs, ns))
        for worker in workers:
            worker.start()
            stack.callback(worker.kill)
        started = time.monotonic()
        pending = list(schedule)
        stored, progress_at = 0, started
        while time.monotonic() - started < options.timeout:
            now = run.stored()
            if now > stored:
                progress_at = time.monotonic()
            stored = now if now >= 0 else stored
            if not pending and time.monotonic() - progress_at > STALLED and run.nothing_left():
                result.notes.append(f"stalled at {stored} pages with nothing left in any queue")
                break
            while pending and stored >= pending[0].at * spec.total:
                run.apply(pending.pop(0), workers)
            if stored >= spec.total and not pending:
                result.completed = True
                break
            for worker in workers:  # one that exited by itself is started again, and said so
                if worker.child is not None and not worker.child.poll():
                    result.notes.append(f"worker {worker.index} exited {worker.child.proc.returncode}")
                    worker.start()
            time.sleep(POLL)
        result.seconds = time.monotonic() - started
        run.settle()
        exits = [worker.stop() for worker in workers]
        if any(code != 0 for code in exits):
            result.notes.append(f"workers' exit codes on SIGTERM: {exits}")
        if not result.completed:
            result.notes.append(f"not every page stored within {options.timeout:g}s")
        result.ledger = asyncio.run(
            take(
                svc.node.amqp_url,
                svc.redis.url,
                names,
                run.database_url(),
                load_config(str(config)),
                [spec.url(h, p) for h in spec.hosts for p in range(spec.pages)],
                sorted(run.logs.glob("*.log")),
            )
        )
        _check(run, spec, access_log, names, feed_queue)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    """Run the schedule; print each run's figures and the totals; exit 1 if any run failed."""
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50, help="how many runs (default 50)")
    parser.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    parser.add_argument("--first", type=int, default=0, help="the first run's index: replay run i alone")
    parser.add_argument("--pages", type=int, default=60, help="pages per host (default 60)")
    parser.add_argument("--faults", type=int, default=6, help="faults per run (default 6)")
    parser.add_argument("--workers", type=int, default=3, help="crawler-consume processes (default 3)")
    parser.add_argument("--only", default=",".join(FAULTS), help=f"faults to draw from: {', '.join(FAULTS)}")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-chaos"), help="runs' directories")
    args = parser.parse_args(argv)
    kinds = tuple(k.strip() for k in args.only.split(",") if k.strip())
    if unknown := [k for k in kinds if k not in FAULTS]:
        parser.error(f"unknown faults {unknown}: choose from {', '.join(FAULTS)}")
    if (why := unusable()) is not None and any(k in NEEDS_ROOT for k in kinds):
        print(f"chaos: {why}: the cut and disk faults are left out", flush=True)
        kinds = tuple(k for k in kinds if k not in NEEDS_ROOT)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    options = Options(
        runs=args.runs,
        seed=args.seed,
        first=args.first,
        pages=args.pages,
        faults=args.faults,
        workers=args.workers,
        kinds=kinds,
        work=args.work,
    )
    report = chaos(options)
    sys.exit(0 if all(r.ok for r in report) else 1)


def chaos(options: Options) -> list[Result]:
    """Every run of `options`, on private services started once; the results, printed as they come."""
    options.work.mkdir(parents=True, exist_ok=True)
    print(
        f"chaos: {options.runs} runs from seed {options.seed} (run {options.first} on), "
        f"{options.hosts} hosts x {options.pages} pages at {options.rate:g}/s, {options.workers} workers, "
        f"{options.faults} faults a run from {', '.join(options.kinds)}; in {options.work}",
        flush=True,
    )
    results = []
    with services(options.work / "services", options.kinds) as svc:
        for index in range(options.first, options.first + options.runs):
            result = run_one(options, svc, index)
            print(result.text(), flush=True)
            results.append(result)
    lost = sum(r.ledger.lost for r in results)
    print(
        f"chaos: {sum(r.ok for r in results)}/{len(results)} runs OK; URLs lost {lost}; refetches per run "
        f"{[r.refetches for r in results]}; feed copies per run {[r.feed_copies for r in results]}",
        flush=True,
    )
    return results


if __name__ == "__main__":
    main()
