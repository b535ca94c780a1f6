"""One large domain served by the host layout: its pages/s against its rate, and how often its pages
went round the host wait queues.

python -m bench.largehost [--pages 200] [--rate 5] [--processes 1]

A domains file's domain past frontier.max_domain_queues (so in the host layout's shards) has an index
linking to `pages` pages, at `rate` requests a second and a burst of 1; a listed domain links to it.
One `crawler crawl` from the listed domain's home, on a fresh vhost, key prefix and SQLite file; with
`--processes N`, `crawler seed` and N `crawler-consume --burst` workers, the others started once the
first has fetched the listed home (a burst worker alone at the start would stop at once).
Printed: the crawl's time, the large domain's pages/s and its requests per 2 s, and the copies each
host wait queue took (RabbitMQ's publish counts, read once the crawl is over and its stats are in).
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

import httpx
import yaml

from bench import services
from bench.procs import Child
from bench.tools import _script, crawler_env
from demo.site import Site, free_port, page, serve

LISTED, LARGE = ("a.test", "127.0.0.21"), ("b.test", "127.0.0.61")
STATS_WAIT = 12.0  # seconds for RabbitMQ's message stats to take in the last publishes (every 5 s)


def sites(pages: int, spread: int = 0) -> tuple[Site, Site]:
    """The listed domain, linking to the large one; the large one's index and its pages. With
    `spread`, that many pages of the listed domain link to the large one's pages too, a share each."""
    port = free_port(LISTED[1], LARGE[1])
    large = Site(*LARGE, port, {})
    large.routes["/"] = page("index", [large.url(f"/{i}") for i in range(pages)])
    for i in range(pages):
        large.routes[f"/{i}"] = page(f"page {i}", [])
    listed = Site(*LISTED, port, {})
    listed.routes["/"] = page("home", [large.url(), *(listed.url(f"/l/{k}") for k in range(spread))])
    for k in range(spread):
        listed.routes[f"/l/{k}"] = page(f"list {k}", [large.url(f"/{i}") for i in range(k, pages, spread)])
    return listed, large


def configure(work: Path, listed: Site, large: Site, rate: float) -> Path:
    (work / "shops.txt").write_text(f"{large.host}\nnever.test\n")  # two: past a line of 2
    config = {
        "defaults": {"sitemaps": False},
        "resolve": {s.host: s.ip for s in (listed, large)},
        "allow_private_networks": True,
        "frontier": {"max_domain_queues": 2},
        "domains": {listed.host: {}},
        "domains_file": {"path": "shops.txt", "template": {"rate": rate, "burst": 1, "max_pages": 100_000}},
    }
    path = work / "domains.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def wait_copies(amqp_url: str) -> dict[str, int]:
    """Messages published to each host wait queue of the vhost, as RabbitMQ counted them."""
    vhost = unquote(urlsplit(amqp_url).path[1:])
    with httpx.Client(base_url=services.MANAGEMENT, auth=services.AUTH, timeout=30, trust_env=False) as api:
        queues = api.get(f"/api/queues/{vhost.replace('/', '%2F')}").raise_for_status().json()
    return {
        q["name"].rsplit(".", 1)[-1]: q.get("message_stats", {}).get("publish", 0)
        for q in queues
        if ".hosts.wait." in q["name"]
    }


def _consumed(env: dict[str, str], log: BinaryIO, listed: Site, large: Site, processes: int) -> int:
    """Seed, then crawl with `processes` burst workers; the first nonzero exit code, or 0."""
    seeded = Child.start("seed", [*_script("crawler"), "seed", listed.url()], env, log).wait()
    if seeded:
        return seeded
    consume = [*_script("crawler-consume"), "--burst"]
    workers = [Child.start("consume 0", consume, env, log)]
    deadline = time.monotonic() + 60
    while not any(path == "/" for _, path in listed.requests) and time.monotonic() < deadline:
        time.sleep(0.05)
    workers += [Child.start(f"consume {i}", consume, env, log) for i in range(1, processes)]
    return next((code for code in (w.wait() for w in workers) if code), 0)


def main(argv: Sequence[str] | None = None) -> None:
    """Crawl one large domain in the host layout; print its pace and its pages' trips."""
    parser = argparse.ArgumentParser(prog="python -m bench.largehost", description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--processes", type=int, default=1, help="crawler-consume workers (1: crawler crawl)")
    parser.add_argument("--spread", type=int, default=0, help="listed pages linking to the large one's too")
    args = parser.parse_args(argv)
    listed, large = sites(args.pages, args.spread)
    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="largehost-") as folder:
        work = Path(folder)
        env = crawler_env(stack, configure(work, listed, large, args.rate), work / "crawl.db", "largehost")
        with serve(listed, large), (work / "crawl.log").open("wb") as log:
            began = time.monotonic()
            if args.processes == 1:
                code = Child.start("crawl", [*_script("crawler"), "crawl", listed.url()], env, log).wait()
            else:
                code = _consumed(env, log, listed, large, args.processes)
            took = time.monotonic() - began
        if code:
            raise SystemExit(f"bench: the crawl failed ({code}), see {work / 'crawl.log'}")
        time.sleep(STATS_WAIT)
        copies = wait_copies(env["CRAWLER_AMQP_URL"])
    times = sorted(t for t, path in large.requests if path != "/robots.txt")
    fetched = len(times)
    spread = times[-1] - times[0] if fetched > 1 else 0.0
    paced = collections.Counter(int((t - times[0]) // 2) * 2 for t in times)
    total = sum(copies.values())
    print(f"{large.host}: {fetched} pages at rate {args.rate:g}/s (burst 1), crawl {took:.1f} s")
    print(f"  its pages' span {spread:.1f} s: {(fetched - 1) / spread if spread else 0:.2f} pages/s")
    print(f"  copies to the host wait queues: {total} ({total / max(1, fetched):.1f} a page)", copies)
    print("  requests per 2 s:", " ".join(f"{k}:{paced[k]}" for k in sorted(paced)))


if __name__ == "__main__":
    main()
