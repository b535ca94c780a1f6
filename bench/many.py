"""One consumer serving many domain queues: startup, starvation, throughput (issue #7).

python -m bench.many [--domains 1000] [--pages 5] [--prefetch N] [--file] [--consumers 1] [--work DIR]

Domains d0001.test, d0002.test, ... are mapped by domains.yaml's `resolve:` onto four loopback IPs
where one nginx serves the same small site for any Host: N pages per domain, the index linking to every
other page. With --file they are listed in a domains file instead (their names answered by a dnsmasq
of the bench's own): past frontier.max_domain_queues, the host layout serves them. `crawler seed`
routes each domain's index, then one `crawler-consume --burst` crawls them all (or --consumers of them,
their CPU, RSS and descriptors summed). Startup is launch to
the consumer's "consuming" line; a domain's first page is launch to the fetch of its index
(fetched_at, the time the fetch began).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import redis
import yaml

from bench import dnsmasq, nginx, services
from bench.procs import Child, service_cpu, total_cpu
from bench.tools import _db_progress, _script, crawler_env

IPS = tuple(f"127.0.0.{41 + i}" for i in range(4))
PORT = 8091
SAMPLE_EVERY = 0.25  # seconds between samples of the consumer's RSS, descriptors and Redis clients
_LOG_KEYS = ("time", "level", "logger", "message")
_FILLER = " ".join(["lorem ipsum dolor sit amet consectetur adipiscing elit"] * 30)


def domain_names(count: int) -> list[str]:
    """d0001.test, d0002.test, ...: as many as asked."""
    width = max(4, len(str(count)))
    return [f"d{i:0{width}d}.test" for i in range(1, count + 1)]


def write_site(root: Path, pages: int) -> None:
    """The site every domain serves: an index linking to pages 1..N-1, each linking on to the next."""
    root.mkdir(parents=True, exist_ok=True)
    others = [f"/p{i}.html" for i in range(1, pages)]
    for i in range(pages):
        links = others if i == 0 else ["/", others[i % len(others)]]
        anchors = "".join(f'<li><a href="{href}">{href}</a></li>' for href in links)
        body = (
            f"<!doctype html><html><head><title>page {i}</title></head><body><h1>page {i}</h1>"
            f'<p class="price">{i}.99 EUR</p><ul>{anchors}</ul><p>{_FILLER}</p></body></html>'
        )
        (root / ("index.html" if i == 0 else f"p{i}.html")).write_text(body)


def nginx_config(site: Path, state: Path) -> str:
    """One server answering every Host on the bench IPs from `site`."""
    listens = "".join(f"        listen {ip}:{PORT} default_server;\n" for ip in IPS)
    server = f"""    server {{
{listens}        server_name _;
        root {site};
        index index.html;
    }}"""
    return nginx.frame(server, state, connections=8192, open_files=100)


def crawler_config(domains: Sequence[str], prefetch: int, nameserver: str | None = None) -> dict[str, object]:
    """domains.yaml: every domain resolved onto the bench IPs, rates and robots.txt out of the way;
    with `nameserver`, the domains listed in domains.txt and resolved by it."""
    listed: dict[str, object] = {"domains": {d: {} for d in domains}}
    if nameserver is not None:
        listed = {"domains_file": "domains.txt", "dns": {"nameservers": [nameserver]}}
    else:
        listed["resolve"] = {d: IPS[i % len(IPS)] for i, d in enumerate(domains)}
    return {
        "defaults": {
            "prefetch": prefetch,
            "rate": 100_000,
            "burst": 100_000,
            "max_depth": 10,
            "obey_robots": False,
            "extract": {"title": "h1", "price": ".price"},
        },
        "allow_private_networks": True,
        **listed,
    }


@dataclass(slots=True)
class Run:
    """What one run measured."""

    domains: int
    pages_per_domain: int
    prefetch: int
    consumers: int = 1
    seed_seconds: float = 0.0
    startup: float | None = None  # launch to the "consuming" line
    startup_fields: dict[str, object] = field(default_factory=dict)  # what that line says of itself
    first_pages: list[float] = field(default_factory=list)  # per domain, launch to its first fetch
    per_domain: list[int] = field(default_factory=list)  # pages stored per domain (0 for none)
    pages: int = 0
    failed: int = 0
    last_page: float = 0.0  # launch to the last fetch
    exit_seconds: float = 0.0
    exit_code: int | None = None
    cpu: float = 0.0
    rabbitmq_cpu: float = 0.0
    redis_cpu: float = 0.0
    nginx_cpu: float = 0.0
    peak_rss_mb: float = 0.0
    rss_mb: list[tuple[int, float]] = field(default_factory=list)  # (pages stored, RSS) samples
    peak_fds: int = 0
    peak_redis_clients: int = 0  # connected_clients above what it was before the consumer started
    warnings: Counter[str] = field(default_factory=Counter)  # the consumer's warnings, by kind
    notes: list[str] = field(default_factory=list)


def _read_log(log: Path, run: Run, started_at: float) -> None:
    """The consumer's "consuming" line (its time and fields) and its warnings, from its JSON log."""
    for line in log.read_text(errors="replace").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        message = str(data.get("message", ""))
        if message.startswith("consuming") and run.startup is None:
            run.startup = datetime.fromisoformat(data["time"]).timestamp() - started_at
            run.startup_fields = {k: v for k, v in data.items() if k not in _LOG_KEYS}
        elif data.get("level") in ("WARNING", "ERROR"):
            # "d0042.test: <error>; will retry": counted by what follows the domain.
            run.warnings[message.split(": ", 1)[-1][:80]] += 1


def _summed_rss(courses: Sequence[list[tuple[int, float]]]) -> list[tuple[int, float]]:
    """The consumers' RSS samples added up, sample by sample (each was sampled in the same round)."""
    return [(rounds[0][0], sum(mb for _, mb in rounds)) for rounds in zip(*courses, strict=False)]


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def _clients(client: redis.Redis) -> int:
    info = client.info("clients")
    return int(info["connected_clients"])


def _pages(db: Path, domains: Sequence[str], started_at: float, run: Run) -> None:
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        rows = conn.execute(
            "SELECT domain, count(*), sum(error IS NULL AND status_code = 200), min(fetched_at),"
            " max(fetched_at) FROM pages GROUP BY domain"
        ).fetchall()
    by_domain = {r[0]: r for r in rows}
    last = started_at
    for d in domains:
        row = by_domain.get(d)
        if row is None:
            run.per_domain.append(0)
            continue
        _, total, ok, first, latest = row
        run.per_domain.append(int(ok or 0))
        run.pages += int(ok or 0)
        run.failed += int(total) - int(ok or 0)
        run.first_pages.append(_unix(first) - started_at)
        last = max(last, _unix(latest))
    run.last_page = last - started_at


def _unix(stored: str) -> float:
    # Stored as naive UTC.
    return datetime.fromisoformat(stored).replace(tzinfo=UTC).timestamp()


def measure(
    domains: int,
    pages: int,
    prefetch: int,
    work: Path,
    timeout: float,
    file: bool = False,
    consumers: int = 1,
) -> Run:
    """Seed `domains` domains of `pages` pages each, crawl them with `consumers` burst consumers, measure."""
    run = Run(domains, pages, prefetch, consumers)
    names = domain_names(domains)
    work.mkdir(parents=True, exist_ok=True)
    site = work / "site"
    write_site(site, pages)
    db = work / "crawl.db"
    config = work / "domains.yaml"
    log_paths = [work / ("consume.log" if i == 0 else f"consume-{i}.log") for i in range(consumers)]
    with ExitStack() as stack:
        nameserver = None
        if file:
            (work / "domains.txt").write_text("".join(f"{d}\n" for d in names))
            hosts = dnsmasq.write_hosts(work / "hosts", {d: IPS[i % len(IPS)] for i, d in enumerate(names)})
            served = dnsmasq.serve(work / "dnsmasq", hosts, ttl=3600, log_queries=False)
            nameserver = stack.enter_context(served).spelled
        config.write_text(yaml.safe_dump(crawler_config(names, prefetch, nameserver)))
        server = stack.enter_context(
            nginx.run(nginx_config(site, work / "nginx"), [(ip, PORT) for ip in IPS], work / "nginx")
        )
        env = crawler_env(stack, config, db, "crawlermany")
        with (work / "setup.log").open("ab") as log:
            begun = time.monotonic()
            seeds = [f"http://{d}:{PORT}/" for d in names]
            if Child.start("seed", [*_script("crawler"), "seed", *seeds], env, log).wait():
                raise SystemExit(f"bench: `crawler seed` failed, see {work / 'setup.log'}")
            run.seed_seconds = time.monotonic() - begun
        client = redis.Redis.from_url(services.REDIS_URL)
        stack.callback(client.close)
        clients_before = _clients(client)
        services_before = service_cpu()
        nginx_before = total_cpu(server.pids())
        logs = [stack.enter_context(path.open("wb")) for path in log_paths]
        argv = [*_script("crawler-consume"), "--burst", "--log-format", "json"]
        started, started_at = time.monotonic(), time.time()
        children = [Child.start(f"consume-{i}", argv, env, log) for i, log in enumerate(logs)]
        progress = _db_progress(db)
        try:
            while any([child.poll() for child in children]):  # a list: every child is polled
                done = progress()
                for child in children:
                    child.sample(done)
                if time.monotonic() - started > timeout:
                    run.notes.append(f"timed out after {timeout:.0f}s: killed")
                    break
                run.peak_fds = max(run.peak_fds, sum(_fds(child.pid) for child in children if child.running))
                run.peak_redis_clients = max(run.peak_redis_clients, _clients(client) - clients_before)
                time.sleep(SAMPLE_EVERY)
        finally:
            for child in children:
                child.kill()
        run.exit_seconds = time.monotonic() - started
        run.exit_code = max((abs(child.proc.returncode or 0) for child in children), default=0)
        services_after = service_cpu()
        run.cpu = sum(child.cpu for child in children)
        run.peak_rss_mb = sum(child.peak_rss_mb for child in children)
        run.rss_mb = _summed_rss([child.rss for child in children])
        run.rabbitmq_cpu = services_after["rabbitmq"] - services_before["rabbitmq"]
        run.redis_cpu = services_after["redis"] - services_before["redis"]
        run.nginx_cpu = total_cpu(server.pids()) - nginx_before
    for path in log_paths:
        _read_log(path, run, started_at)
    if run.startup is None:
        run.notes.append(f"no 'consuming' line in {log_paths[0]}")
    _pages(db, names, started_at, run)
    if run.exit_code:
        run.notes.append(f"a consumer exited with {run.exit_code}, see {work}/consume*.log")
    return run


def _spread(values: Sequence[float], spec: str) -> str:
    if not values:
        return "-"
    return "/".join(format(v, spec) for v in (min(values), statistics.median(values), max(values)))


def _rss_course(run: Run, expected: int) -> str:
    marks = [next((mb for done, mb in run.rss_mb if done >= expected * f), None) for f in (0.1, 0.5, 0.9)]
    return "/".join("-" if mb is None else f"{mb:.0f}" for mb in marks) + " MB"


def table(run: Run) -> str:
    """The run as `measure: value` lines."""
    expected = run.domains * run.pages_per_domain
    starved = sum(1 for n in run.per_domain if n == 0)
    after_startup = run.last_page - (run.startup or 0.0)
    fields = ", ".join(f"{k} {v}" for k, v in run.startup_fields.items())
    rows = [
        (
            "domains x pages, prefetch",
            f"{run.domains} x {run.pages_per_domain}, prefetch {run.prefetch}, {run.consumers} consumer(s)",
        ),
        ("seed (declare + route)", f"{run.seed_seconds:.1f} s"),
        ("startup: launch to consuming", "-" if run.startup is None else f"{run.startup:.1f} s"),
        ("  as the consumer logs it", fields or "-"),
        ("first page per domain", f"{_spread(run.first_pages, '.1f')} s (min/median/max)"),
        ("domains with no page", f"{starved}"),
        ("pages per domain", f"{_spread([float(n) for n in run.per_domain], '.0f')} (min/median/max)"),
        ("pages stored", f"{run.pages}/{expected}" + (f" ({run.failed} failed)" if run.failed else "")),
        ("last page", f"{run.last_page:.1f} s"),
        ("pages/s, launch to last page", f"{run.pages / run.last_page:.1f}" if run.last_page > 0 else "-"),
        # Not when the crawl was over by the time the last queue was subscribed (before, it could be).
        ("pages/s, after startup", f"{run.pages / after_startup:.1f}" if after_startup > 1 else "-"),
        ("exit (burst: drained)", f"{run.exit_seconds:.1f} s, code {run.exit_code}"),
        ("consumer CPU", f"{run.cpu:.1f} s = {1000 * run.cpu / max(run.pages, 1):.2f} ms/page"),
        (
            "rabbitmq / redis / nginx CPU",
            f"{run.rabbitmq_cpu:.1f} / {run.redis_cpu:.1f} / {run.nginx_cpu:.1f} s",
        ),
        ("consumer peak RSS", f"{run.peak_rss_mb:.0f} MB"),
        ("  RSS at 10/50/90 % of pages", _rss_course(run, expected)),
        ("consumer peak descriptors", f"{run.peak_fds}"),
        ("peak Redis clients added", f"{run.peak_redis_clients}"),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    lines += [f"warning x{n}: {what}" for what, n in run.warnings.most_common(5)]
    lines += [f"note: {n}" for n in run.notes]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of `python -m bench.many`."""
    parser = argparse.ArgumentParser(prog="python -m bench.many", description=__doc__.splitlines()[0])
    parser.add_argument("--domains", type=int, default=1000, help="domains, each its own queue")
    parser.add_argument("--pages", type=int, default=5, help="pages per domain (the index included)")
    parser.add_argument("--prefetch", type=int, default=16, help="per-queue prefetch")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-many"), help="site, logs, database")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds before the consumer is killed")
    parser.add_argument("--file", action="store_true", help="list the domains in a domains file")
    parser.add_argument("--consumers", type=int, default=1, help="crawler-consume processes (figures summed)")
    args = parser.parse_args(argv)
    if args.domains < 1 or args.pages < 2 or args.consumers < 1:
        parser.error("at least 1 domain, 2 pages per domain and 1 consumer")
    file = " --file" if args.file else ""
    print(
        f"python -m bench.many --domains {args.domains} --pages {args.pages} --prefetch {args.prefetch}"
        f" --consumers {args.consumers}{file}"
    )
    print(datetime.now().strftime("%d %B %Y %H:%M"))
    run = measure(args.domains, args.pages, args.prefetch, args.work, args.timeout, args.file, args.consumers)
    print(table(run))


if __name__ == "__main__":
    main()
