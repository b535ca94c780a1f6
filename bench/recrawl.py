"""A second pass over the bench site with some pages changed, against the first pass, in one run:
bytes from the site, CPU per page and pages/s.

python -m bench.recrawl [--pages 5000] [--changed 0.1] [--work DIR]

Pass 1 crawls the site (`crawler seed` and two `crawler-consume --burst`) into SQLite with a recrawl
schedule on. Then `--changed` of the pages get a new price (nginx gives them a new ETag and
Last-Modified), and pass 2 refreshes every stored page (`crawler recrawl --all`, then two consumers):
the unchanged ones are asked conditionally and answered 304. nginx logs each answer's body bytes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import yaml

from bench import nginx
from bench.procs import Child
from bench.profile import parse, summary
from bench.site import SiteSpec, file_name, write
from bench.tools import (
    TOOL,
    Bench,
    Result,
    _measured,
    _profiled,
    _script,
    crawler_config,
    crawler_env,
    seed_and_consume,
)


@dataclass(slots=True)
class Pass:
    """One pass: its result, and the body bytes and answers the site sent for it."""

    result: Result
    bytes_sent: int = 0
    answers: dict[str, int] | None = None  # status -> how many

    @property
    def cpu_ms(self) -> float:
        """The crawler's processes' CPU per page, in ms."""
        return self.result.ms_per_page(TOOL) or 0.0


def _log_since(log: Path, offset: int) -> tuple[int, dict[str, int], int]:
    """Body bytes and answers by status in the access log after `offset`; the new offset."""
    data = log.read_bytes()[offset:] if log.exists() else b""
    sent, answers = 0, dict[str, int]()
    for line in data.decode(errors="replace").splitlines():
        _host, _uri, status, size = line.split(" ")[:4]
        answers[status] = answers.get(status, 0) + 1
        sent += int(size) if size.isdigit() else 0
    return sent, answers, offset + len(data)


def _change(spec: SiteSpec, site: Path, share: float) -> int:
    """Give every 1/share-th page of each host a new price; how many pages changed."""
    step = max(1, round(1 / share))
    changed = 0
    for host in spec.hosts:
        for page in range(1, spec.pages, step):
            target = site / host / file_name(page)
            html = target.read_text()
            start = html.index('<p class="price">') + len('<p class="price">')
            end = html.index("</p>", start)
            target.write_text(html[:start] + "0.99 EUR (sale)" + html[end:])
            changed += 1
    return changed


def _consume(
    result: Result, stack: ExitStack, children: list[Child], env: dict[str, str], out: Path, profile: bool
) -> None:
    """Two `crawler-consume --burst`, until both are done (the first under py-spy, if `profile`)."""
    consumers = []
    for i in range(2):
        log = stack.enter_context((out / f"consume-{i}.log").open("wb"))
        consumers.append(Child.start(f"consume {i}", [*_script("crawler-consume"), "--burst"], env, log))
    children.extend(consumers)
    if profile:
        result.profiles.append(stack.enter_context(_profiled(consumers[0], out)))
    for c in consumers:
        if c.wait():
            result.notes.append(f"{c.name} exited with {c.proc.returncode}, see {out}")


def run(
    pages: int, share: float, work: Path, profile: bool = False, history: bool = True
) -> tuple[Pass, Pass, int]:
    """Both passes; and how many pages changed between them. `history`: versions and the change feed."""
    spec = SiteSpec(pages=pages, seed="recrawl")
    run_dir = work / datetime.now().strftime("run-%Y%m%d-%H%M%S")
    site = write(spec, run_dir / "site")  # a copy of its own: pass 2 edits it
    access = run_dir / "requests.log"
    config = crawler_config(spec)
    config["defaults"] = {
        **config["defaults"],  # type: ignore[dict-item]
        "recrawl": {"every": "1h"},
        "history": {} if history else None,
    }
    (run_dir / "domains.yaml").write_text(yaml.safe_dump(config))
    first, second = Pass(Result("first pass", 2, spec.total)), Pass(Result("second pass", 2, spec.total))
    with ExitStack() as stack:
        server = stack.enter_context(nginx.serve(spec, site, run_dir / "nginx", access_log=access))
        bench = Bench(spec, server, run_dir, timeout=1800)
        env = crawler_env(stack, run_dir / "domains.yaml", run_dir / "crawl.db", "recrawlbench")
        out1 = run_dir / "pass-1"
        out1.mkdir()
        with _measured(bench, first.result) as children:
            started = time.monotonic()
            consumers = seed_and_consume(bench, first.result, stack, children, env, out1, 2)
            for c in consumers:
                c.wait()
            first.result.seconds = time.monotonic() - started
        first.result.pages = spec.total
        first.bytes_sent, first.answers, offset = _log_since(access, 0)
        changed = _change(spec, site, share)
        out2 = run_dir / "pass-2"
        out2.mkdir()
        with _measured(bench, second.result) as children:
            started = time.monotonic()
            log = stack.enter_context((out2 / "recrawl.log").open("wb"))
            recrawl = Child.start("recrawl", [*_script("crawler"), "recrawl", "--all"], env, log)
            children.append(recrawl)
            if recrawl.wait():
                second.result.notes.append(f"crawler recrawl exited with {recrawl.proc.returncode}")
            _consume(second.result, stack, children, env, out2, profile)
            second.result.seconds = time.monotonic() - started
        second.result.pages = spec.total
        second.bytes_sent, second.answers, _ = _log_since(access, offset)
    return first, second, changed


def table(first: Pass, second: Pass, changed: int) -> str:
    """The two passes side by side, and the second against the first."""
    rows = [("pass", "pages", "seconds", "pages/s", "tool ms/p", "MB sent", "answers")]
    for p in (first, second):
        r = p.result
        answers = ", ".join(f"{n} x {s}" for s, n in sorted((p.answers or {}).items()))
        rows.append(
            (r.tool, str(r.pages), f"{r.seconds:.1f}", f"{r.pages_per_s:.1f}", f"{p.cpu_ms:.2f}",
             f"{p.bytes_sent / 1e6:.1f}", answers)
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    ratio = second.bytes_sent / first.bytes_sent if first.bytes_sent else 0.0
    cpu = second.cpu_ms / first.cpu_ms if first.cpu_ms else 0.0
    speed = second.result.pages_per_s / first.result.pages_per_s if first.result.pages_per_s else 0.0
    lines.append(
        f"{changed} of {first.result.pages} pages changed; second pass against the first: bytes {ratio:.0%} "
        f"(aim <= 25%), CPU per page {cpu:.0%} (aim <= 40%), pages/s x{speed:.2f}"
    )
    for p in (first, second):
        lines += [f"note: {p.result.tool}: {n}" for n in p.result.notes]
    return "\n".join(lines)


def history_pairs(pairs: int, pages: int, share: float, work: Path) -> str:
    """The second pass's CPU per page with history on and off, alternating, and their means."""
    seconds: dict[bool, list[float]] = {True: [], False: []}
    lines = ["pair  history  second pass: pages/s  tool ms/p  answers"]
    for pair in range(1, pairs + 1):
        for history in (True, False):
            _, second, _ = run(pages, share, work, history=history)
            seconds[history].append(second.cpu_ms)
            answers = ", ".join(f"{n} x {s}" for s, n in sorted((second.answers or {}).items()))
            lines.append(
                f"{pair:<4}  {'on' if history else 'off':<7}  {second.result.pages_per_s:20.1f}  "
                f"{second.cpu_ms:9.2f}  {answers}"
            )
    on, off = (sum(seconds[h]) / len(seconds[h]) for h in (True, False))
    lines.append(
        f"mean  on {on:.2f} ms/p, off {off:.2f} ms/p: history costs {on / off - 1:+.1%} (aim within 5%)"
    )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run both passes and print the table."""
    parser = argparse.ArgumentParser(prog="python -m bench.recrawl", description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=5000, help="pages per host (default %(default)s)")
    parser.add_argument("--changed", type=float, default=0.1, help="share of pages changed (default 0.1)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-recrawl"), help="site and logs")
    parser.add_argument("--profile", action="store_true", help="py-spy one consumer of the second pass")
    parser.add_argument(
        "--history-pairs",
        type=int,
        metavar="N",
        help="instead: N pairs of runs, history (versions, the change feed) on then off, alternating",
    )
    args = parser.parse_args(argv)
    if not 0 < args.changed <= 1:
        sys.exit("bench.recrawl: --changed is a share of the pages, in (0, 1]")
    if args.history_pairs:
        print(history_pairs(args.history_pairs, args.pages, args.changed, args.work))
        return
    first, second, changed = run(args.pages, args.changed, args.work, args.profile)
    print(table(first, second, changed))
    for path in second.result.profiles:
        if path.exists():
            print(
                f"\nprofile of one consumer of the second pass ({path}):\n" + summary(parse(path.read_text()))
            )


if __name__ == "__main__":
    main()
