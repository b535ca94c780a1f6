"""One command for the end-to-end bench: Scrapy, scrapy-redis and the crawler on the same site, in turn.

python -m bench.run [--pages N] [--only scrapy,scrapy-redis,crawler] [--sink sqlite,postgresql] [--profile]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path

from bench import nginx
from bench.procs import service_cpu
from bench.profile import parse, summary
from bench.site import DEFAULT_PAGES, SiteSpec, write
from bench.tools import NGINX, SINKS, TOOL, Bench, Result, run_crawler, run_scrapy, run_scrapy_redis

TOOLS = ("scrapy", "scrapy-redis", "crawler")
KINDS = (TOOL, "rabbitmq", "redis", "postgres", NGINX)
BACKGROUND_SECONDS = 3.0


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "-" if value is None else format(value, spec)


def _ratio(a: Result, b: Result | None) -> str:
    if b is None or not b.pages_per_s:
        return "-"
    return f"{a.pages_per_s / b.pages_per_s:.2f}x"


def table(results: Sequence[Result]) -> str:
    """The results as a table, with pages/s ratios against Scrapy and two scrapy-redis processes."""
    scrapy = next((r for r in results if r.tool == "scrapy"), None)
    redis2 = next((r for r in results if r.tool == "scrapy-redis" and r.processes == 2), None)
    head = (
        "tool", "procs", "pages", "seconds", "pages/s",
        *(f"{k} ms/p" for k in KINDS),
        "peak RSS MB", "RSS MB 10%->end", "vs scrapy", "vs s-redis x2",
    )  # fmt: skip
    rows = [head]
    for r in results:
        rows.append(
            (
                r.tool,
                str(r.processes),
                f"{r.pages}/{r.expected}",
                f"{r.seconds:.1f}",
                f"{r.pages_per_s:.1f}",
                *(_fmt(r.ms_per_page(k), ".2f") for k in KINDS),
                f"{r.peak_rss_mb:.0f}",
                f"{_fmt(r.rss_early_mb, '.0f')}->{_fmt(r.rss_end_mb, '.0f')}",
                _ratio(r, scrapy),
                _ratio(r, redis2),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    for r in results:
        if r.pages < r.expected:
            lines.append(f"note: {r.tool} x{r.processes}: INCOMPLETE, {r.expected - r.pages} pages missing")
        for note in r.notes:
            lines.append(f"note: {r.tool} x{r.processes}: {note}")
    return "\n".join(lines)


def background() -> str:
    """The shared services' CPU use while no tool runs (other users of the machine)."""
    before = service_cpu()
    time.sleep(BACKGROUND_SECONDS)
    after = service_cpu()
    rates = ", ".join(
        f"{k} {1000 * (after[k] - before[k]) / BACKGROUND_SECONDS:.0f} ms/s" for k in sorted(after)
    )
    return f"background CPU of the shared services with no tool running: {rates}"


def _tools(value: str) -> list[str]:
    chosen = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in TOOLS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown tool(s) {', '.join(unknown)}; choose from {', '.join(TOOLS)}"
        )
    return chosen


def _crawler(processes: int, sink: str, bench: Bench) -> Result:
    return run_crawler(bench, processes, sink)


def _sinks(value: str) -> list[str]:
    chosen = [t.strip() for t in value.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in SINKS]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(
            f"unknown sink(s) {', '.join(unknown)}; choose from {', '.join(SINKS)}"
        )
    return chosen


def main(argv: Sequence[str] | None = None) -> None:
    """Generate the site, serve it, run each tool in turn and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pages", type=int, default=DEFAULT_PAGES, help="pages per host (default %(default)s)"
    )
    parser.add_argument(
        "--only", type=_tools, default=list(TOOLS), help="comma-separated: " + ",".join(TOOLS)
    )
    parser.add_argument("--processes", type=int, default=2, help="crawler-consume processes (default 2)")
    parser.add_argument(
        "--sink",
        type=_sinks,
        default=["sqlite"],
        help="the crawler's database, comma-separated for a row each: sqlite (a file), postgresql "
        "(a fresh database on BENCH_PG_SERVER, default postgresql://postgres@localhost:5432)",
    )
    parser.add_argument(
        "--work", type=Path, default=Path("/tmp/crawler-bench"), help="site, logs and databases"
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="seconds one tool may take (default 1800)"
    )
    parser.add_argument(
        "--stall", type=float, default=120, help="seconds without progress before a tool is killed"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy the first crawler-consume process")
    parser.add_argument(
        "--redirects", action="store_true", help="every page but the index answers 301 to its new home"
    )
    args = parser.parse_args(argv)
    # Stopped early, the bench still kills its tools and nginx (the finally blocks run on exit).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)

    spec = SiteSpec(pages=args.pages)
    site = write(spec, args.work / f"site-{args.pages}")
    run_dir = args.work / datetime.now().strftime("run-%Y%m%d-%H%M%S")
    print(f"site: {spec.total} pages ({len(spec.hosts)} hosts x {spec.pages}) in {site}; logs in {run_dir}")
    runs: list[tuple[str, Callable[[Bench], Result]]] = []
    if "scrapy" in args.only:
        runs.append(("scrapy", run_scrapy))
    if "scrapy-redis" in args.only:
        runs.append(("scrapy-redis x1", lambda b: run_scrapy_redis(b, 1)))
        runs.append(("scrapy-redis x2", lambda b: run_scrapy_redis(b, 2)))
    if "crawler" in args.only:
        for sink in args.sink:
            runs.append((f"crawler x{args.processes} ({sink})", partial(_crawler, args.processes, sink)))
    results = []
    with nginx.serve(spec, site, run_dir / "nginx", redirects=args.redirects) as server:
        print(background(), flush=True)
        for label, run in runs:
            bench = Bench(spec, server, run_dir, args.timeout, args.stall, args.profile)
            print(f"running {label} ...", flush=True)
            result = run(bench)
            results.append(result)
            print(
                f"  {result.pages} pages in {result.seconds:.1f}s: {result.pages_per_s:.1f} pages/s",
                flush=True,
            )
    print()
    print(table(results))
    for result in results:
        for n, (main_cpu, others) in enumerate(result.threads):
            print(
                f"{result.tool} process {n}: main thread {main_cpu:.1f} CPU s, "
                f"other threads (the sink's to_thread workers) {others:.1f} CPU s (last sample)"
            )
        for path in result.profiles:
            if path.exists():
                print(f"\nprofile of one crawler-consume process ({path}):")
                print(summary(parse(path.read_text())))
            else:
                print(f"\nno profile was written: see {path.parent / 'py-spy.log'}")


if __name__ == "__main__":
    main()
