"""The fetch gateway's cost: the bench site crawled directly, then through one crawler-gateway and two exits.

python -m bench.gateway [--pages N] [--processes 2] [--profile]

Each exit is a small asyncio forward proxy (a process of its own, `python -m bench.gateway proxy LISTEN
SOURCE`) connecting out from its own loopback address, so the site sees two clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import yaml

from bench import nginx
from bench.exits import serve_client
from bench.procs import Child, cpu_seconds
from bench.profile import parse, summary
from bench.site import SiteSpec, write
from bench.tools import (
    TOOL,
    Bench,
    Result,
    _crawler_pages,
    _db_progress,
    _measured,
    _memory,
    _profiled,
    _python,
    _watch,
    crawler_config,
    crawler_env,
    seed_and_consume,
)

GATEWAY_LISTEN = "127.0.0.50"
PROXY_LISTEN = "127.0.0.51"
EXIT_SOURCES = ("127.0.0.52", "127.0.0.53")
KEY = "bench-gateway-key-0123456789"
KEY_ENV = "BENCH_GATEWAY_KEY"
GATEWAY = "gateway"
PROXIES = "proxies"
TARGET_SHARE = 0.60  # the gateway path's pages/s against direct
TARGET_GATEWAY_MS = 1.0  # the gateway's CPU per fetch


# -- the exits ------------------------------------------------------------------------------------


async def _proxy(listen: str, port: int, source: str) -> None:
    server = await asyncio.start_server(lambda r, w: serve_client(r, w, source), listen, port, backlog=1024)
    async with server:
        await server.serve_forever()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _listening(host: str, port: int, within: float = 20.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1):
            return
        time.sleep(0.1)
    raise SystemExit(f"bench: nothing listens on {host}:{port} after {within:g}s")


# -- the runs -------------------------------------------------------------------------------------


@dataclass(slots=True)
class GatewayRun:
    """A crawler run, and the CPU of the gateway and proxies it went through (if any)."""

    result: Result
    side: dict[str, float] = field(default_factory=dict)  # kind -> CPU seconds

    def ms_per_page(self, kind: str) -> float | None:
        """CPU milliseconds per page of the consumers (TOOL), the gateway or the proxies."""
        if not self.result.pages:
            return None
        if kind == TOOL:
            return self.result.ms_per_page(TOOL)
        return 1000 * self.side[kind] / self.result.pages if kind in self.side else None


def _proxies_yaml(path: Path, ports: Sequence[int]) -> Path:
    config = {
        "exits": [
            {"id": f"e{i}", "url": f"http://{PROXY_LISTEN}:{port}", "max_inflight": 1000}
            for i, port in enumerate(ports)
        ],
        "keys": [{"id": "bench", "key_env": KEY_ENV, "max_concurrency": 10_000}],
        # The bench site is one host per IP, each its own domain: politeness is the workers' (off here).
        "min_interval": 0,
        "allow_private_networks": True,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def run(bench: Bench, processes: int, via_gateway: bool) -> GatewayRun:
    """`crawler seed` the index pages, then `processes` x `crawler-consume --burst`, maybe via the gateway."""
    label = "gateway" if via_gateway else "direct"
    out = bench.work / label
    out.mkdir(parents=True, exist_ok=True)
    result = Result(f"crawler {label}", processes, bench.spec.total)
    done = GatewayRun(result)
    db = out / "crawl.db"
    config = crawler_config(bench.spec)
    if via_gateway:
        config["defaults"] = {**config["defaults"], "fetch": "api"}  # type: ignore[dict-item]
    (out / "domains.yaml").write_text(yaml.safe_dump(config))
    side: list[tuple[str, Child]] = []
    side_cpu: dict[str, float] = {}
    startup: dict[int, float] = {}  # pid -> CPU seconds spent starting, before the crawl
    with ExitStack() as stack:
        env = crawler_env(stack, out / "domains.yaml", db, f"gwbench{label}")
        if via_gateway:
            ports = [_free_port(PROXY_LISTEN) for _ in EXIT_SOURCES]
            for i, (port, source) in enumerate(zip(ports, EXIT_SOURCES, strict=True)):
                log = stack.enter_context((out / f"proxy-{i}.log").open("wb"))
                argv = _python("-m", "bench.gateway", "proxy", PROXY_LISTEN, str(port), source)
                side.append((PROXIES, Child.start(f"proxy {i}", argv, env, log)))
            gw_port = _free_port(GATEWAY_LISTEN)
            log = stack.enter_context((out / "gateway.log").open("wb"))
            argv = [
                *_script_beside("crawler-gateway"),
                "--listen",
                f"{GATEWAY_LISTEN}:{gw_port}",
                "--proxies",
                str(_proxies_yaml(out / "proxies.yaml", ports)),
            ]
            gateway = Child.start("gateway", argv, {**env, KEY_ENV: KEY}, log)
            side.append((GATEWAY, gateway))
            for port in ports:
                _listening(PROXY_LISTEN, port)
            _listening(GATEWAY_LISTEN, gw_port)
            # Imports and setup are paid once per process, not per fetch: left out of the figures.
            startup = {child.pid: cpu_seconds(child.pid) for _, child in side}
            env = {
                **env,
                "CRAWLER_FETCH_API_URL": f"http://{GATEWAY_LISTEN}:{gw_port}/fetch",
                "CRAWLER_FETCH_API_KEY": KEY,
            }
            if bench.profile:
                result.profiles.append(stack.enter_context(_profiled(gateway, out)))
        try:
            children = stack.enter_context(_measured(bench, result))
            started, started_at = time.monotonic(), time.time()
            consumers = seed_and_consume(bench, result, stack, children, env, out, processes)
            _watch(bench, result, started, consumers, _db_progress(db))
            result.exit_seconds = time.monotonic() - started
        finally:
            # SIGTERM, then reap: wait4's rusage is exact; the CPU spent starting is taken off.
            for _, child in side:
                if child.running:
                    child.proc.send_signal(signal.SIGTERM)
            for kind, child in side:
                give_up = time.monotonic() + 30
                while child.poll() and time.monotonic() < give_up:
                    time.sleep(0.05)
                child.kill()
                side_cpu[kind] = side_cpu.get(kind, 0.0) + child.cpu - startup.get(child.pid, 0.0)
            done.side = side_cpu
    _crawler_pages(result, db, started_at)
    _memory(result, consumers)
    return done


def _script_beside(name: str) -> list[str]:
    script = Path(sys.executable).with_name(name)
    if script.exists():
        return [str(script)]
    return _python("-c", "import sys; from crawler.gateway.cli import main; sys.exit(main(sys.argv[1:]))")


def table(runs: Sequence[GatewayRun]) -> str:
    """The runs as a table, with the gateway path's pages/s against direct."""
    direct = next((r for r in runs if r.result.tool == "crawler direct"), None)
    head = ("path", "procs", "pages", "seconds", "pages/s", "vs direct", "consumers ms/p",
            "gateway ms/p", "proxies ms/p", "rabbitmq ms/p", "redis ms/p", "nginx ms/p")  # fmt: skip
    rows: list[tuple[str, ...]] = [head]
    for r in runs:
        res = r.result
        share = res.pages_per_s / direct.result.pages_per_s if direct and direct.result.pages_per_s else None
        rows.append(
            (
                res.tool,
                str(res.processes),
                f"{res.pages}/{res.expected}",
                f"{res.seconds:.1f}",
                f"{res.pages_per_s:.1f}",
                "-" if share is None else f"{share:.0%}",
                *(_fmt(r.ms_per_page(k)) for k in (TOOL, GATEWAY, PROXIES)),
                *(_fmt(res.ms_per_page(k)) for k in ("rabbitmq", "redis", "nginx")),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    for r in runs:
        if r.result.pages < r.result.expected:
            lines.append(
                f"note: {r.result.tool}: INCOMPLETE, {r.result.expected - r.result.pages} pages missing"
            )
        lines.extend(f"note: {r.result.tool}: {n}" for n in r.result.notes)
    gw = next((r for r in runs if r.result.tool == "crawler gateway"), None)
    if gw is not None and direct is not None and direct.result.pages_per_s:
        share = gw.result.pages_per_s / direct.result.pages_per_s
        ms = gw.ms_per_page(GATEWAY)
        lines.append(
            f"targets: gateway path {share:.0%} of direct pages/s (target >= {TARGET_SHARE:.0%}): "
            f"{'met' if share >= TARGET_SHARE else 'MISSED'}; gateway {_fmt(ms)} CPU-ms per fetch "
            f"(target <= {TARGET_GATEWAY_MS:g}): "
            f"{'met' if ms is not None and ms <= TARGET_GATEWAY_MS else 'MISSED'}"
        )
    return "\n".join(lines)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the site, crawl it directly and then through the gateway, print the table."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["proxy"]:
        listen, port, source = args_in[1:4]
        with contextlib.suppress(KeyboardInterrupt):
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
            asyncio.run(_proxy(listen, int(port), source))
        return
    parser = argparse.ArgumentParser(prog="python -m bench.gateway", description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000, help="pages per host (default %(default)s)")
    parser.add_argument("--processes", type=int, default=2, help="crawler-consume processes (default 2)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-bench"), help="site, logs, databases")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one run may take")
    parser.add_argument("--stall", type=float, default=60, help="seconds without progress before a kill")
    parser.add_argument("--profile", action="store_true", help="py-spy the gateway")
    args = parser.parse_args(args_in)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    spec = SiteSpec(pages=args.pages)
    site = write(spec, args.work / f"site-{args.pages}")
    run_dir = args.work / datetime.now().strftime("gateway-%Y%m%d-%H%M%S")
    print(f"site: {spec.total} pages ({len(spec.hosts)} hosts x {spec.pages}); logs in {run_dir}", flush=True)
    runs: list[GatewayRun] = []
    with nginx.serve(spec, site, run_dir / "nginx") as server:
        for via in (False, True):
            bench = Bench(spec, server, run_dir, args.timeout, args.stall, args.profile and via)
            print(f"running {'through the gateway' if via else 'direct'} ...", flush=True)
            runs.append(run(bench, args.processes, via))
            res = runs[-1].result
            print(f"  {res.pages} pages in {res.seconds:.1f}s: {res.pages_per_s:.1f} pages/s", flush=True)
    print()
    print(table(runs))
    for done in runs:
        for path in done.result.profiles:
            if path.exists():
                print(f"\nprofile of the gateway ({path}):")
                print(summary(parse(path.read_text())))


if __name__ == "__main__":
    main()
