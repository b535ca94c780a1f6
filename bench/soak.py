"""A long soak: two consumers crawl a large site while one is SIGKILLed every few minutes and
RabbitMQ restarts once; reports the slope of each process's memory and descriptors and the outcome.

python -m bench.soak [--minutes 30] [--kill-every 120] [--rate 5] [--node NAME --amqp-url URL]

The site (bench/site.py) is served by nginx on 127.0.0.31-34 with a request log; it is sized so that
the crawl, paced by the domains' rate, takes about `--minutes`. Consumer A runs from start to end (its
slopes are the leak measure); consumer B is SIGKILLed every `--kill-every` seconds and started again.
RabbitMQ is a private node started for the run (bench/node.py) unless `--node` names one to restart.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import nginx, services
from bench.ledger import Ledger, take
from bench.node import LIB, Node, private_node
from bench.procs import Child, rss_mb
from bench.site import SiteSpec, write
from bench.tools import _script, crawler_config
from crawler.config import load_config
from crawler.names import Names
from demo.site import free_port

SAMPLE_EVERY = 2.0  # seconds between samples of every process
WARM_UP = 0.2  # of a process's life: left out of its slope (imports, caches, pools filling)
FILL = 0.75  # of the run the crawl is sized to take at the paced rate: kills and the restart cost time
GRACE = 0.25  # of the run: how much longer an unfinished crawl may go on, without kills, before it fails
DRAIN = 90.0  # seconds consumers get to drain on SIGTERM


@dataclass(slots=True)
class Series:
    """One process's samples: (seconds since the run began, RSS MB, open descriptors)."""

    name: str
    pid: int
    points: list[tuple[float, float, int]] = field(default_factory=list)

    def sample(self, now: float) -> None:
        """Record RSS and descriptors now, if the process still runs."""
        mb = rss_mb(self.pid)
        try:
            fds = len(os.listdir(f"/proc/{self.pid}/fd"))
        except OSError:
            return
        if mb is not None:
            self.points.append((now, mb, fds))

    def _settled(self, warm_up: float) -> list[tuple[float, float, int]]:
        if len(self.points) < 4:
            return self.points
        start = self.points[0][0] + warm_up * (self.points[-1][0] - self.points[0][0])
        return [p for p in self.points if p[0] >= start]

    def slopes(self, warm_up: float = WARM_UP) -> tuple[float, float]:
        """Least-squares slopes after the warm-up (a share of the life): MB and descriptors per minute."""
        points = self._settled(warm_up)
        return _slope([(t, mb) for t, mb, _ in points]) * 60, _slope([(t, fd) for t, _, fd in points]) * 60

    @property
    def minutes(self) -> float:
        """How long it was sampled."""
        return (self.points[-1][0] - self.points[0][0]) / 60 if len(self.points) > 1 else 0.0

    def line(self) -> str:
        """One row of the report."""
        if not self.points:
            return f"{self.name:<22} (no samples)"
        rss, fds = self.slopes()
        first, last = self.points[0], self.points[-1]
        peak = max(p[1] for p in self.points)
        return (
            f"{self.name:<22} {self.minutes:5.1f} min  RSS {first[1]:6.1f} -> {last[1]:6.1f} MB "
            f"(peak {peak:6.1f}, slope {rss:+6.2f} MB/min)  fds {first[2]:4d} -> {last[2]:4d} "
            f"(slope {fds:+6.2f}/min)"
        )


def _slope(points: Sequence[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    return 0.0 if var == 0 else sum((t - mx) * (v - my) for t, v in points) / var


@dataclass(slots=True)
class Outcome:
    """What the crawl ended with, from the sink, the broker and the site's request log."""

    expected: int
    stored: int = 0  # distinct site pages stored with a 200 and no error
    rows: int = 0
    duplicate_rows: int = 0
    failed_rows: int = 0  # rows with an error or a status other than 200
    requests: int = 0  # requests the site served
    refetches: int = 0  # requests beyond the first of each page
    left_in_queues: int = 0  # discovered URLs in a queue at the end: domain, retry, dead, unrouted
    ledger: Ledger = field(default_factory=Ledger)  # every URL the crawl discovered, accounted for

    @property
    def lost(self) -> int:
        """Site pages not stored."""
        return self.expected - self.stored


@dataclass(slots=True)
class Report:
    """A soak's figures."""

    minutes: float
    kills: int = 0
    restarts: int = 0
    restart_seconds: float = 0.0
    completed_after: float | None = None  # minutes from start until every page was stored
    outcome: Outcome = field(default_factory=lambda: Outcome(0))
    survivor: Series | None = None  # consumer A
    killed: list[Series] = field(default_factory=list)  # consumer B, each life
    others: list[Series] = field(default_factory=list)  # RabbitMQ, nginx
    exits: dict[str, int | None] = field(default_factory=dict)  # consumer A and the last B: exit codes
    refetch_bound: int = 0  # what the kills and the restart may cost at most: their unacked deliveries
    run_dir: Path | None = None  # its logs, site log, database and node: kept, whatever the outcome
    notes: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The printed result."""
        o = self.outcome
        done = f"{self.completed_after:.1f} min" if self.completed_after is not None else "NOT COMPLETED"
        lines = [
            f"soak: {self.minutes:.1f} min, {self.kills} SIGKILLs of consumer B, {self.restarts} RabbitMQ "
            f"restart ({self.restart_seconds:.0f} s down), crawl completed after {done}",
            f"pages: {o.expected} on the site, {o.stored} stored, lost {o.lost}, duplicate rows "
            f"{o.duplicate_rows}, failed rows {o.failed_rows}, left in queues {o.left_in_queues}",
            o.ledger.text(),
            f"site requests: {o.requests}, refetches {o.refetches} (bound from in-flight deliveries: "
            f"{self.refetch_bound})",
            "process                 sampled      memory                                              "
            "descriptors",
        ]
        series = [s for s in (self.survivor, *self.killed, *self.others) if s is not None]
        lines += [s.line() for s in series]
        lines += [f"exit code of {name}: {code}" for name, code in self.exits.items()]
        lines += [f"note: {n}" for n in self.notes]
        lines.append(f"run directory (kept): {self.run_dir}")
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Options:
    """How long, how hard and where a soak runs."""

    minutes: float = 30.0
    kill_every: float = 120.0
    rate: float = 5.0  # pages/s per host, fleet-wide
    hosts: int = 4
    pages: int | None = None  # per host; default: what `rate` crawls in FILL of the run
    page_bytes: int = 8_000
    prefetch: int = 16
    # RabbitMQ restarts once this share of the pages is stored: by progress, not by the clock, so it
    # hits a running crawl even where the consumers are slow to start.
    restart_at: float = 0.5
    work: Path = Path("/tmp/crawler-soak")
    node: str | None = None  # an existing node to restart (rabbitmqctl -n NODE), with amqp_url
    amqp_url: str | None = None

    def pages_per_host(self) -> int:
        """Pages per host, so that the paced crawl takes about FILL of the run."""
        return self.pages or max(20, int(self.rate * self.minutes * 60 * FILL))


class _External:
    """A node the soak did not start: restarted with the system's rabbitmqctl."""

    def __init__(self, name: str, amqp_url: str) -> None:
        self.name = name
        self.amqp_url = amqp_url

    def restart_app(self) -> float:
        started = time.monotonic()
        ctl = str(LIB / "rabbitmqctl") if (LIB / "rabbitmqctl").exists() else "rabbitmqctl"
        for action in ("stop_app", "start_app", "await_startup"):
            subprocess.run([ctl, "-n", self.name, action], check=True, capture_output=True, timeout=180)
        return time.monotonic() - started

    def pid(self) -> int | None:
        return None


def _stored(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            row = conn.execute(
                "SELECT count(DISTINCT url) FROM pages WHERE status_code = 200 AND error IS NULL"
            ).fetchone()
    except sqlite3.Error:
        return 0
    return int(row[0] or 0)


def _outcome(spec: SiteSpec, db: Path, access_log: Path, ledger: Ledger) -> Outcome:
    site = {spec.url(h, p) for h in spec.hosts for p in range(spec.pages)}
    left = sum(ledger.queued.values()) + sum(ledger.dead.values())
    out = Outcome(spec.total, left_in_queues=left, ledger=ledger)
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)) as conn:
        rows = conn.execute("SELECT url, status_code, error FROM pages").fetchall()
    out.rows = len(rows)
    out.duplicate_rows = len(rows) - len({r[0] for r in rows})
    out.stored = len({r[0] for r in rows if r[1] == 200 and r[2] is None} & site)
    out.failed_rows = sum(1 for r in rows if r[1] != 200 or r[2] is not None)
    hits: Counter[tuple[str, str]] = Counter()
    if access_log.exists():
        for line in access_log.read_text().splitlines():
            host, uri, *_ = line.split(" ")
            hits[host, uri] += 1
    out.requests = sum(hits.values())
    out.refetches = sum(n - 1 for n in hits.values())
    return out


def _consumer(name: str, env: dict[str, str], logs: Path, stack: ExitStack) -> Child:
    """Start a crawler-consume process, killed (if still running) and its log closed when `stack` ends."""
    log = stack.enter_context((logs / f"{name.replace(' ', '-')}.log").open("ab"))
    child = Child.start(name, [*_script("crawler-consume"), "--trace"], env, log)
    stack.callback(child.kill)
    return child


def _terminate(child: Child) -> int | None:
    if not child.running:
        return child.proc.returncode
    child.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + DRAIN
    while child.poll() and time.monotonic() < deadline:
        time.sleep(0.2)
    if child.running:
        child.kill()
        return None
    return child.proc.returncode


def run(options: Options) -> Report:
    """Run one soak and return its figures."""
    spec = SiteSpec(
        pages=options.pages_per_host(),
        hosts=tuple(f"127.0.0.{31 + i}" for i in range(options.hosts)),
        page_bytes=options.page_bytes,
        seed="soak",
    )
    spec = dataclasses.replace(spec, port=free_port(*spec.hosts))
    work = options.work
    work.mkdir(parents=True, exist_ok=True)
    site = write(spec, work / f"site-{spec.pages}x{len(spec.hosts)}-{spec.port}")
    run_dir = work / time.strftime("run-%Y%m%d-%H%M%S")
    logs = run_dir / "logs"
    logs.mkdir(parents=True)
    print(
        f"soak: {spec.total} pages ({len(spec.hosts)} hosts x {spec.pages}) at {options.rate:g}/s per host, "
        f"{options.minutes:g} min, logs in {run_dir}",
        flush=True,
    )
    report = Report(options.minutes, run_dir=run_dir)
    with ExitStack() as stack:
        if options.node is not None:
            if options.amqp_url is None:
                raise SystemExit("soak: --node needs --amqp-url, the AMQP URL of that node")
            broker: Node | _External = _External(options.node, options.amqp_url)
        else:
            broker = stack.enter_context(private_node(run_dir / "rabbitmq", "crawler-soak"))
        access_log = run_dir / "requests.log"
        server = stack.enter_context(nginx.serve(spec, site, run_dir / "nginx", access_log=access_log))
        prefix = stack.enter_context(services.key_prefix("soak"))
        config = run_dir / "domains.yaml"
        domains = crawler_config(spec)
        domains["defaults"] = {
            **domains["defaults"],  # type: ignore[dict-item]
            "rate": options.rate,
            "burst": max(1, math.ceil(options.rate)),
            "prefetch": options.prefetch,
        }
        config.write_text(yaml.safe_dump(domains))
        db = run_dir / "crawl.db"
        env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "CRAWLER_AMQP_URL": broker.amqp_url,
            "CRAWLER_REDIS_URL": services.REDIS_URL,
            "CRAWLER_DATABASE_URL": f"sqlite:///{db}",
            "CRAWLER_CONFIG": str(config),
            "CRAWLER_PREFIX": prefix,
        }
        for argv, name in (
            ([*_script("crawler"), "db", "upgrade"], "upgrade"),
            ([*_script("crawler"), "seed", *spec.index_urls()], "seed"),
        ):
            with (logs / f"{name}.log").open("wb") as log:
                if Child.start(name, argv, env, log).wait():
                    raise SystemExit(f"soak: {' '.join(argv[-2:])} failed, see {logs / name}.log")
        started = time.monotonic()
        a = _consumer("consumer A", env, logs, stack)
        b = _consumer("consumer B 1", env, logs, stack)
        report.survivor = Series("consumer A", a.pid)
        report.killed.append(Series("consumer B 1", b.pid))
        others = [Series("rabbitmq", pid) for pid in [broker.pid()] if pid is not None]
        others += [Series(f"nginx {n}", pid) for n, pid in enumerate(server.pids())]
        report.others = others
        restarted = threading.Event()
        restart_thread: threading.Thread | None = None

        def restart() -> None:
            try:
                report.restart_seconds = broker.restart_app()
                report.restarts += 1
            except Exception as exc:
                report.notes.append(f"RabbitMQ restart failed: {exc}")
            finally:
                restarted.set()

        end = started + options.minutes * 60
        give_up = end + GRACE * options.minutes * 60
        next_kill = started + options.kill_every
        restart_after = math.ceil(options.restart_at * spec.total)
        completed = False
        while time.monotonic() < give_up:
            now = time.monotonic()
            for s in (report.survivor, report.killed[-1], *others):
                s.sample(now - started)
            if not a.poll():
                report.notes.append(f"consumer A exited early with {a.proc.returncode}")
                break
            done = _stored(db)
            if done >= spec.total:
                completed = True
                report.completed_after = (now - started) / 60
                break
            if now >= next_kill and now < end and not (restart_thread and not restarted.is_set()):
                b.proc.send_signal(signal.SIGKILL)
                b.wait()
                report.kills += 1
                name = f"consumer B {report.kills + 1}"
                b = _consumer(name, env, logs, stack)
                report.killed.append(Series(name, b.pid))
                next_kill = now + options.kill_every
                print(f"  {(now - started) / 60:5.1f} min: killed consumer B, started {name}", flush=True)
            if restart_thread is None and done >= restart_after:
                print(
                    f"  {(now - started) / 60:5.1f} min: restarting RabbitMQ ({done} pages stored)",
                    flush=True,
                )
                restart_thread = threading.Thread(target=restart, daemon=True)
                restart_thread.start()
            time.sleep(SAMPLE_EVERY)
        if restart_thread is not None:
            restart_thread.join()
        if not completed:
            report.notes.append(f"the crawl did not complete in {(give_up - started) / 60:g} min")
        report.exits = {"consumer A": _terminate(a), b.name: _terminate(b)}
        for series in (report.survivor, *report.killed):
            if len(series.points) < 2:
                report.notes.append(f"{series.name}: too few samples for a slope")
        # Taken with every consumer stopped, before the prefix's Redis keys (the seen-set) are deleted.
        ledger = asyncio.run(
            take(
                broker.amqp_url,
                services.REDIS_URL,
                Names(prefix),
                f"sqlite:///{db}",
                load_config(str(config)),
                [spec.url(h, p) for h in spec.hosts for p in range(spec.pages)],
                sorted(logs.glob("*.log")),
            )
        )
        report.outcome = _outcome(spec, db, access_log, ledger)
        report.minutes = (time.monotonic() - started) / 60
        # Each kill may return one consumer's unacked deliveries, the restart both consumers'.
        in_flight = options.prefetch * options.hosts
        report.refetch_bound = in_flight * (report.kills + 2 * report.restarts)
    return report


def main(argv: Sequence[str] | None = None) -> None:
    """Run a soak and print its figures; exit 1 if it lost or duplicated anything."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (default 30)")
    parser.add_argument("--kill-every", type=float, default=120.0, help="seconds between SIGKILLs")
    parser.add_argument("--rate", type=float, default=5.0, help="pages/s per host (default 5)")
    parser.add_argument("--hosts", type=int, default=4, help="hosts of the site (default 4)")
    parser.add_argument("--pages", type=int, default=None, help="pages per host (default: fills the run)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-soak"), help="site, logs, node")
    parser.add_argument("--node", default=None, help="restart this RabbitMQ node instead of a private one")
    parser.add_argument("--amqp-url", default=None, help="with --node: that node's AMQP URL")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    options = Options(
        minutes=args.minutes,
        kill_every=args.kill_every,
        rate=args.rate,
        hosts=args.hosts,
        pages=args.pages,
        work=args.work,
        node=args.node,
        amqp_url=args.amqp_url,
    )
    report = run(options)
    print()
    print(report.text(), flush=True)
    o = report.outcome
    bad = o.lost or o.duplicate_rows or not o.ledger.ok or report.completed_after is None
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
