"""One command for the end-to-end bench: Scrapy, scrapy-redis and the crawler on the same site, in turn.

python -m bench.run [--pages N] [--only scrapy,scrapy-redis,crawler] [--sink sqlite,postgresql] [--profile]
python -m bench.run --only crawler --archive-pairs N
python -m bench.run --only crawler --frontier-pairs N
python -m bench.run --only crawler --content-pairs N

With --archive-pairs, the crawler runs N pairs of times per sink instead of once, the WARC archive off
then on (`archive: true` for every domain, CRAWLER_ARCHIVE_DIR in the run's directory), alternating,
and the table compares them: pages/s, CPU per page, and archive bytes per page (the files' size over
the pages stored). --frontier-pairs does the same with the frontier's queues classic then quorum
(`frontier: {queue_type: quorum, replicas: 3}` in domains.yaml), comparing pages/s and the CPU per
page of the crawler and of RabbitMQ. On a single RabbitMQ node a quorum queue has one member: its
Raft log and fsyncs are measured, not its replication. --content-pairs compares `content: {}` off
and on for every domain (main content, language, simhash claimed; docs/content.md): pages/s and CPU
per page, the content pool's processes included (each consumer reaps them: their CPU is its own).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import TypeVar

from bench import nginx, tools
from bench.bands import broker_note
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
    lines = _aligned(rows, 1)
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


ARCHIVE_DIR = "CRAWLER_ARCHIVE_DIR"
QUORUM = {"queue_type": "quorum", "replicas": 3}  # domains.yaml's `frontier` for --frontier-pairs
Config = dict[str, object]


@contextmanager
def _configured(
    change: Callable[[Config], Config] | None, env: Mapping[str, str] | None = None
) -> Iterator[None]:
    """For the block, the crawler's domains.yaml is changed by `change` and its environment has `env`
    (None: as usual). bench.tools writes domains.yaml with its crawler_config and gives the crawler
    this process's environment: both are swapped here."""
    plain = tools.crawler_config
    env = env or {}
    before = {name: os.environ.get(name) for name in env}
    if change is not None:
        tools.crawler_config = lambda spec: change(plain(spec))
        os.environ.update(env)
    try:
        yield
    finally:
        tools.crawler_config = plain
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _archived(config: Config) -> Config:
    defaults = config["defaults"]
    assert isinstance(defaults, dict)
    return {**config, "defaults": {**defaults, "archive": True}}


def _archiving(directory: Path | None) -> AbstractContextManager[None]:
    """For the block, the crawler's domains.yaml archives every domain and CRAWLER_ARCHIVE_DIR is
    `directory` (None: as usual, nothing archived)."""
    if directory is None:
        return _configured(None)
    return _configured(_archived, {ARCHIVE_DIR: str(directory)})


def _quorum(config: Config) -> Config:
    return {**config, "frontier": QUORUM}


def _content(config: Config) -> Config:
    defaults = config["defaults"]
    assert isinstance(defaults, dict)
    return {**config, "defaults": {**defaults, "content": {}}}


@dataclass(slots=True)
class Paired:
    """One crawler run of a comparison in pairs: the first of a pair as usual (`on` false), the
    second with the change compared."""

    pair: int
    sink: str
    on: bool
    result: Result


@dataclass(slots=True)
class Archived(Paired):
    """One crawler run of an --archive-pairs comparison."""

    archive_bytes: int = 0
    files: int = 0

    @property
    def bytes_per_page(self) -> float | None:
        return self.archive_bytes / self.result.pages if self.on and self.result.pages else None


P = TypeVar("P", bound=Paired)
ARCHIVE_STATES = ("off", "on")
FRONTIER_STATES = ("classic", "quorum")
CONTENT_STATES = ("off", "on")


def _archived_run(processes: int, sink: str, pair: int, on: bool, bench: Bench) -> Archived:
    """One crawler run, archiving every domain or none, in a directory of its own under the bench's."""
    bench.work = bench.work / f"archive-{sink}-{pair}-{ARCHIVE_STATES[on]}"
    directory = bench.work / "archive"
    with _archiving(directory if on else None):
        result = run_crawler(bench, processes, sink)
    result.tool += " archive" if on else ""
    files = sorted(directory.glob("*.warc.gz")) if on else []
    return Archived(pair, sink, on, result, sum(f.stat().st_size for f in files), len(files))


def _frontier_run(processes: int, sink: str, pair: int, quorum: bool, bench: Bench) -> Paired:
    """One crawler run on classic or quorum frontier queues, in a directory of its own."""
    bench.work = bench.work / f"frontier-{sink}-{pair}-{FRONTIER_STATES[quorum]}"
    with _configured(_quorum if quorum else None):
        result = run_crawler(bench, processes, sink)
    result.tool += " quorum" if quorum else ""
    return Paired(pair, sink, quorum, result)


def _content_run(processes: int, sink: str, pair: int, on: bool, bench: Bench) -> Paired:
    """One crawler run with `content:` on for every domain or off, in a directory of its own."""
    bench.work = bench.work / f"content-{sink}-{pair}-{CONTENT_STATES[on]}"
    with _configured(_content if on else None):
        result = run_crawler(bench, processes, sink)
    result.tool += " content" if on else ""
    return Paired(pair, sink, on, result)


def _pairs(
    count: int,
    processes: int,
    sinks: Sequence[str],
    what: str,
    states: tuple[str, str],
    run: Callable[[int, str, int, bool, Bench], P],
    into: list[P],
) -> list[tuple[str, Callable[[Bench], Result]]]:
    """The runs of `count` pairs per sink, `states[0]` then `states[1]`, alternating; each run's
    record goes to `into`."""
    runs: list[tuple[str, Callable[[Bench], Result]]] = []
    for pair in range(1, count + 1):
        for sink in sinks:
            for on in (False, True):

                def one(b: Bench, sink: str = sink, pair: int = pair, on: bool = on) -> Result:
                    into.append(run(processes, sink, pair, on, b))
                    return into[-1].result

                runs.append((f"crawler x{processes} ({sink}), {what} {states[on]}, pair {pair}", one))
    return runs


def _aligned(rows: Sequence[Sequence[str]], left: int) -> list[str]:
    """Rows as lines of columns, the first `left` flush left, the others right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(
            c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]


def _by_sink(runs: Sequence[P]) -> Iterator[tuple[str, dict[bool, list[P]]]]:
    """Per sink with runs of both states: its runs without the change (False) and with it (True)."""
    for sink in dict.fromkeys(run.sink for run in runs):
        of = {on: [run for run in runs if run.sink == sink and run.on == on] for on in (False, True)}
        if of[False] and of[True]:
            yield sink, of


def _mean(runs: Sequence[Paired], value: Callable[[Result], float | None]) -> float:
    return statistics.mean(value(run.result) or 0.0 for run in runs)


def archive_table(runs: Sequence[Archived]) -> str:
    """Each run of an --archive-pairs comparison, then per sink the means and what archiving costs."""
    head = ("pair", "sink", "archive", "pages", "pages/s", "tool ms/p", "all ms/p", "archive KB/p", "files")
    rows = [head]
    for run in runs:
        r = run.result
        per_page = run.bytes_per_page
        rows.append(
            (
                str(run.pair),
                run.sink,
                ARCHIVE_STATES[run.on],
                f"{r.pages}/{r.expected}",
                f"{r.pages_per_s:.1f}",
                _fmt(r.ms_per_page(TOOL), ".2f"),
                _fmt(_all_ms(r), ".2f"),
                _fmt(per_page / 1000 if per_page is not None else None, ".2f"),
                str(run.files) if run.on else "-",
            )
        )
    lines = _aligned(rows, 3)
    for sink, of in _by_sink(runs):
        cpu = {on: _mean(of[on], _tool_ms) for on in of}
        rate = {on: _mean(of[on], _pages_per_s) for on in of}
        size = statistics.mean(r.bytes_per_page or 0 for r in of[True])
        lines.append(
            f"mean {sink}: tool CPU on {cpu[True]:.2f} ms/p, off {cpu[False]:.2f} ms/p: archiving costs "
            f"{cpu[True] / cpu[False] - 1:+.1%} CPU per page (aim within 15%); pages/s on "
            f"{rate[True]:.1f}, off {rate[False]:.1f} ({rate[True] / rate[False] - 1:+.1%}); "
            f"{size / 1000:.2f} KB of archive a page"
        )
    return "\n".join(lines)


def _all_ms(r: Result) -> float | None:
    return sum(r.cpu.values()) * 1000 / r.pages if r.pages else None


def _tool_ms(r: Result) -> float | None:
    return r.ms_per_page(TOOL)


def _rabbitmq_ms(r: Result) -> float | None:
    return r.ms_per_page("rabbitmq")


def _pages_per_s(r: Result) -> float:
    return r.pages_per_s


FRONTIER_MEASURES: tuple[tuple[str, Callable[[Result], float | None], str], ...] = (
    ("pages/s", _pages_per_s, ".1f"),
    ("tool ms/p", _tool_ms, ".2f"),
    ("rabbitmq ms/p", _rabbitmq_ms, ".2f"),
    ("all ms/p", _all_ms, ".2f"),
)


def frontier_table(runs: Sequence[Paired], broker: str) -> str:
    """Each run of a --frontier-pairs comparison, then per sink the means and quorum/classic ratios;
    `broker` says what the quorum queues were replicated over."""
    head = ("pair", "sink", "frontier", "pages", *(name for name, _, _ in FRONTIER_MEASURES))
    rows = [head]
    for run in runs:
        r = run.result
        rows.append(
            (
                str(run.pair),
                run.sink,
                FRONTIER_STATES[run.on],
                f"{r.pages}/{r.expected}",
                *(_fmt(value(r), spec) for _, value, spec in FRONTIER_MEASURES),
            )
        )
    for sink, of in _by_sink(runs):
        means = {on: [_mean(of[on], value) for _, value, _ in FRONTIER_MEASURES] for on in of}
        for on in of:
            rows.append(
                (
                    "mean",
                    sink,
                    FRONTIER_STATES[on],
                    "",
                    *(format(m, spec) for m, (_, _, spec) in zip(means[on], FRONTIER_MEASURES, strict=True)),
                )
            )
        ratios = (f"x{q / c:.2f}" if c else "-" for q, c in zip(means[True], means[False], strict=True))
        rows.append(("ratio", sink, "quorum/classic", "", *ratios))
    return "\n".join([*_aligned(rows, 3), f"note: {broker}"])


def content_table(runs: Sequence[Paired]) -> str:
    """Each run of a --content-pairs comparison, then per sink the means and what content costs."""
    rows = [("pair", "sink", "content", "pages", "pages/s", "tool ms/p", "all ms/p")]
    for run in runs:
        r = run.result
        rows.append(
            (
                str(run.pair),
                run.sink,
                CONTENT_STATES[run.on],
                f"{r.pages}/{r.expected}",
                f"{r.pages_per_s:.1f}",
                _fmt(r.ms_per_page(TOOL), ".2f"),
                _fmt(_all_ms(r), ".2f"),
            )
        )
    lines = _aligned(rows, 3)
    for sink, of in _by_sink(runs):
        cpu = {on: _mean(of[on], _tool_ms) for on in of}
        rate = {on: _mean(of[on], _pages_per_s) for on in of}
        lines.append(
            f"mean {sink}: tool CPU on {cpu[True]:.2f} ms/p, off {cpu[False]:.2f} ms/p "
            f"(x{cpu[True] / cpu[False]:.1f}); pages/s on {rate[True]:.1f}, off {rate[False]:.1f}"
        )
    return "\n".join(lines)


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
    parser.add_argument(
        "--archive-pairs",
        type=int,
        default=0,
        metavar="N",
        help="the crawler N pairs of times per sink instead of once: the WARC archive off, then on "
        "(every domain), alternating, compared side by side",
    )
    parser.add_argument(
        "--frontier-pairs",
        type=int,
        default=0,
        metavar="N",
        help="the crawler N pairs of times per sink instead of once: the frontier's queues classic, "
        "then quorum (3 replicas asked for), alternating, compared side by side",
    )
    parser.add_argument(
        "--content-pairs",
        type=int,
        default=0,
        metavar="N",
        help="the crawler N pairs of times per sink instead of once: `content:` off, then on (every "
        "domain), alternating, compared side by side",
    )
    args = parser.parse_args(argv)
    pairs = (args.archive_pairs, args.frontier_pairs, args.content_pairs)
    if min(pairs) < 0:
        parser.error("--archive-pairs, --frontier-pairs and --content-pairs must be 0 or more")
    if sum(1 for n in pairs if n) > 1:
        parser.error("--archive-pairs, --frontier-pairs and --content-pairs go one at a time")
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
    archived: list[Archived] = []
    frontiers: list[Paired] = []
    contents: list[Paired] = []
    if "crawler" in args.only and args.content_pairs:
        runs += _pairs(
            args.content_pairs, args.processes, args.sink, "content", CONTENT_STATES, _content_run, contents
        )
    elif "crawler" in args.only and args.archive_pairs:
        runs += _pairs(
            args.archive_pairs, args.processes, args.sink, "archive", ARCHIVE_STATES, _archived_run, archived
        )
    elif "crawler" in args.only and args.frontier_pairs:
        runs += _pairs(
            args.frontier_pairs,
            args.processes,
            args.sink,
            "frontier",
            FRONTIER_STATES,
            _frontier_run,
            frontiers,
        )
    elif "crawler" in args.only:
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
    if archived:
        print()
        print(archive_table(archived))
    if frontiers:
        print()
        print(frontier_table(frontiers, broker_note()))
    if contents:
        print()
        print(content_table(contents))
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
