"""What a crash and a Redis loss cost: two consumers crawl five slow sites; one is SIGKILLed and
restarted, and the crawl's Redis keys are deleted; the sites' own request logs tell what was fetched
again and whether each site's rate held.

python -m bench.crash [--pages 40] [--kill-at 0.3] [--redis-loss-at 0.5] [--sink postgresql]

Five hosts on 127.0.0.41-45 (demo.site, in this process), each a home page linking to `--pages`
posts, fetched at 1 to 5 requests/s with a burst of 2. s3.test asks `Crawl-delay: 1` in robots.txt;
s5.test has pages that hang past the 10 s fetch timeout; s2.test has a page that always answers 500.
Consumer A runs throughout; B is SIGKILLed once `--kill-at` of the pages were requested, and started
again at once; at `--redis-loss-at` every Redis key of the crawl is deleted (a flush, or a restart of
a Redis without persistence). Both run in burst mode: the run ends when the work is done.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench import services
from bench.procs import Child
from bench.tools import _script, crawler_env
from demo.site import Reply, Route, Site, free_port, page, serve

RATES = (1, 2, 3, 4, 5)
BURST = 2
RETRY_DELAYS = (1.0, 2.0, 4.0)
TIMEOUT = 10.0
HANG = TIMEOUT + 2  # seconds a hanging page takes: past the timeout
HANGING = 3  # hanging pages on s5.test
FAILING = "/always500"
POLL = 0.1


@dataclass(slots=True)
class Report:
    """What the sites saw, and what the consumers said of their acks."""

    requests: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # host -> (time, path)
    pages: int = 0
    killed_at: int | None = None  # requests seen when B was killed
    lost_at: int | None = None  # ... and when Redis lost the crawl's keys
    acks: list[str] = field(default_factory=list)  # each consumer's "acked: ..." line
    exits: list[str] = field(default_factory=list)

    def refetched(self) -> Counter[str]:
        """Pages answered 200 more than once, by URL."""
        counts = Counter(
            f"{host}{path}"
            for host, log in self.requests.items()
            for _, path in log
            if path != "/robots.txt" and path != FAILING and not path.startswith("/hang/")
        )
        return Counter({url: n - 1 for url, n in counts.items() if n > 1})

    def text(self) -> str:
        """The report as printed."""
        killed = f"B killed after {self.killed_at} requests" if self.killed_at is not None else "no kill"
        lost = f"Redis lost after {self.lost_at} requests" if self.lost_at is not None else "no Redis loss"
        lines = [f"{self.pages} pages; {killed}, {lost}"]
        refetched = self.refetched()
        lines.append(f"pages fetched again with 200: {sum(refetched.values())} {sorted(refetched)[:8]}")
        attempts = sum(1 for _, p in self.requests["s2.test"] if p == FAILING)
        lines.append(f"{FAILING} requested {attempts} times (at most {len(RETRY_DELAYS) + 1})")
        head = ("site", "rate", "requests", "max 1 s", "limit", "max 10 s", "limit")
        lines.append(f"{head[0]:<9} " + " ".join(f"{h:>8}" for h in head[1:]))
        for (host, log), rate in zip(sorted(self.requests.items()), RATES, strict=True):
            times = [t for t, _ in log]
            one, ten = max_in_window(times, 1), max_in_window(times, 10)
            row = (rate, len(times), one, rate + BURST + 1, ten, 10 * rate + BURST + 1)
            lines.append(f"{host:<9} " + " ".join(f"{n:>8}" for n in row))
        lines += self.acks or ["no consumer logged its ack delays"]
        lines += self.exits
        return "\n".join(lines)


def max_in_window(times: Sequence[float], window: float) -> int:
    """The most requests in any window of `window` seconds."""
    ordered = sorted(times)
    best, j = 0, 0
    for i, start in enumerate(ordered):
        while j < len(ordered) and ordered[j] < start + window:
            j += 1
        best = max(best, j - i)
    return best


def sites(pages: int) -> list[Site]:
    """The five hosts on one free port."""
    hosts = [(f"s{i + 1}.test", f"127.0.0.{41 + i}") for i in range(len(RATES))]
    port = free_port(*(ip for _, ip in hosts))
    out = []
    for host, ip in hosts:
        links = [f"/post/{n}" for n in range(1, pages + 1)]
        routes: dict[str, Route] = {p: page(f"{host} {p}", ["/"]) for p in links}
        if host == "s2.test":
            links.append(FAILING)
            routes[FAILING] = Reply(500, b"<html>broken</html>")
        if host == "s3.test":
            robots = b"User-agent: *\nCrawl-delay: 1\n"
            routes["/robots.txt"] = Reply(200, robots, {"Content-Type": "text/plain"})
        if host == "s5.test":
            for n in range(1, HANGING + 1):
                links.append(f"/hang/{n}")
                routes[f"/hang/{n}"] = _hang
        routes["/"] = page(f"{host} home", links)
        out.append(Site(host, ip, port, routes))
    return out


def _hang(count: int) -> Reply:
    time.sleep(HANG)  # the crawler gives up first; the thread ends after it
    return page("late", [])


def config(sites: Sequence[Site]) -> dict[str, object]:
    """domains.yaml: each host at its rate, burst 2, the retry tiers and timeout above."""
    return {
        "defaults": {"burst": BURST, "timeout": TIMEOUT, "retry_delays": list(RETRY_DELAYS)},
        "resolve": {s.host: s.ip for s in sites},
        "allow_private_networks": True,
        "domains": {s.host: {"rate": rate} for s, rate in zip(sites, RATES, strict=True)},
    }


def run(pages: int, kill_at: float | None, loss_at: float | None, sink: str, work: Path) -> Report:
    """One crawl with the faults asked for; the report."""
    run_dir = work / time.strftime("run-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True)
    hosts = sites(pages)
    (run_dir / "domains.yaml").write_text(yaml.safe_dump(config(hosts)))
    expected = sum(len(s.routes) for s in hosts)  # every route once (robots.txt included where served)
    report = Report()
    with ExitStack() as stack:
        pg = stack.enter_context(services.database()) if sink == "postgresql" else None
        env = crawler_env(stack, run_dir / "domains.yaml", run_dir / "crawl.db", "crash", pg)
        stack.enter_context(serve(*hosts))
        seed_log = stack.enter_context((run_dir / "seed.log").open("wb"))
        seeded = Child.start("seed", [*_script("crawler"), "seed", *(s.url() for s in hosts)], env, seed_log)
        if seeded.wait():
            raise SystemExit(f"bench.crash: crawler seed failed, see {run_dir / 'seed.log'}")

        def consumer(name: str) -> Child:
            log = stack.enter_context((run_dir / f"{name}.log").open("ab"))
            child = Child.start(name, [*_script("crawler-consume"), "--burst"], env, log)
            stack.callback(child.kill)
            return child

        def requested() -> int:
            return sum(len(s.requests) for s in hosts)

        a, b = consumer("consumer-A"), consumer("consumer-B")
        children = [a, b]
        while any(c.poll() for c in children):
            done = requested()
            if kill_at is not None and report.killed_at is None and done >= kill_at * expected:
                b.proc.send_signal(signal.SIGKILL)
                b.wait()
                report.killed_at = done
                children.append(consumer("consumer-B"))
            if loss_at is not None and report.lost_at is None and done >= loss_at * expected:
                services.delete_keys(env["CRAWLER_PREFIX"])
                report.lost_at = done
            time.sleep(POLL)
        for c in children:
            if c.wait() not in (0, -signal.SIGKILL):
                report.exits.append(f"a consumer exited with {c.proc.returncode}: see {run_dir}")
    report.requests = {s.host: list(s.requests) for s in hosts}
    report.pages = expected
    for name in ("consumer-A", "consumer-B"):
        lines = (run_dir / f"{name}.log").read_text(errors="replace").splitlines()
        report.acks += [f"{name} {line}" for line in lines if line.startswith("acked: ")]
    return report


def main(argv: Sequence[str] | None = None) -> None:
    """Run the crawl and print what the sites saw."""
    parser = argparse.ArgumentParser(prog="python -m bench.crash", description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=40, help="posts per host (default %(default)s)")
    parser.add_argument("--kill-at", type=float, default=0.3, help="fraction of requests; <0: no kill")
    parser.add_argument("--redis-loss-at", type=float, default=0.5, help="fraction of requests; <0: none")
    parser.add_argument("--sink", choices=("sqlite", "postgresql"), default="postgresql")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-crash"), help="logs and databases")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    report = run(
        args.pages,
        args.kill_at if args.kill_at >= 0 else None,
        args.redis_loss_at if args.redis_loss_at >= 0 else None,
        args.sink,
        args.work,
    )
    print(report.text())


if __name__ == "__main__":
    main()
