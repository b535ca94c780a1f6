"""The renderer's cost: rendered pages/s, CPU-ms and peak RSS per render with 1 and 2 browsers,
against fetching the same pages without rendering, through one crawler-gateway.

python -m bench.render [--renders N] [--browsers 1,2] [--contexts 4]

The site (pages whose links a script inserts after a fetch(), each with an image, a font and a
stylesheet) and the exit (a forward proxy) run in this process; the gateway runs as a process of its
own, and its CPU and memory are its whole process tree: Python, Playwright's driver and Chromium.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml
from aiohttp import web
from redis.asyncio import Redis

from bench.exits import serve_client
from bench.procs import cpu_seconds
from crawler.gateway.render.processes import tree_cpu, tree_rss

SITE = "127.0.0.61"
EXIT_LISTEN, EXIT_SOURCE = "127.0.0.62", "127.0.0.63"
GATEWAY = "127.0.0.60"
KEY = "bench-render-key-0123456789"
REDIS_URL = os.environ.get("CRAWLER_REDIS_URL", "redis://127.0.0.1:6379/0")
TARGET_PER_BROWSER = 5.0  # rendered pages/s per browser, heavy resources blocked
FILLER = "<p>" + "lorem ipsum dolor sit amet " * 40 + "</p>"

PAGE = """<html><head><title>page {n}</title><link rel="stylesheet" href="/style.css">
<style>@font-face {{ font-family: f; src: url(/font.woff2); }} body {{ font-family: f; }}</style></head>
<body><h1>page {n}</h1><img src="/img/{n}.png"><ul id="links"></ul>{filler}
<script>
fetch('/api/{n}').then(r => r.json()).then(d => {{
  const ul = document.getElementById('links');
  for (const href of d.links) {{
    const li = document.createElement('li'); li.innerHTML = '<a href="' + href + '">' + href + '</a>';
    ul.appendChild(li);
  }}
  ul.setAttribute('data-done', '1');
}});
</script></body></html>"""


async def _site() -> web.AppRunner:
    async def serve(request: web.Request) -> web.Response:
        path = request.path
        if path.startswith("/p/"):
            n = path.removeprefix("/p/")
            return web.Response(text=PAGE.format(n=n, filler=FILLER * 6), content_type="text/html")
        if path.startswith("/api/"):
            k = int(path.removeprefix("/api/"))
            return web.json_response({"links": [f"/p/{k * 10 + i}" for i in range(10)]})
        if path == "/style.css":
            return web.Response(text="h1 { color: #333 }", content_type="text/css")
        return web.Response(body=b"\0" * 50_000, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, SITE, 0, backlog=1024).start()
    return runner


@dataclass(slots=True)
class Run:
    """One measured run."""

    label: str
    browsers: int
    pages: int
    seconds: float
    cpu: float  # the gateway's process tree, seconds
    cpu_python: float  # of which the gateway's own process (Python), seconds
    peak_rss_mb: float
    rss_first_mb: float  # after the first tenth of the run
    rss_last_mb: float  # at its end
    failed: int

    @property
    def rate(self) -> float:
        return self.pages / self.seconds if self.seconds else 0.0


async def _gateway(path: Path, port: int, prefix: str) -> subprocess.Popen[bytes]:
    env = dict(os.environ) | {
        "CRAWLER_REDIS_URL": REDIS_URL,
        "CRAWLER_PREFIX": prefix,
        "BENCH_RENDER_KEY": KEY,
    }
    proc = subprocess.Popen(  # noqa: ASYNC220 (started once, before anything is measured)
        [
            sys.executable,
            "-c",
            "import sys; from crawler.gateway.cli import main; sys.exit(main(sys.argv[1:]))",
            "--listen",
            f"{GATEWAY}:{port}",
            "--proxies",
            str(path),
        ],
        env=env,
        stdin=subprocess.DEVNULL,
    )
    async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
        for _ in range(600):
            try:
                health = (await client.get(f"http://{GATEWAY}:{port}/healthz")).json()
                if health.get("ok"):
                    return proc
            except (httpx.HTTPError, ValueError):
                pass
            if proc.poll() is not None:
                raise SystemExit(f"bench: crawler-gateway exited {proc.returncode}")
            await asyncio.sleep(0.1)
    raise SystemExit("bench: crawler-gateway did not come up")


async def measure(
    label: str, base: str, site: str, gateway: subprocess.Popen[bytes], n: int, concurrency: int, render: bool
) -> Run:
    """`n` pages through the gateway, `concurrency` at a time; the gateway tree's CPU and RSS."""
    params = {"render_js": "true", "wait_for": "[data-done]"} if render else {"render_js": "false"}
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    failed = 0
    done = 0
    rss: list[float] = []

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal failed, done
        while not queue.empty():
            i = queue.get_nowait()
            resp = await client.get(
                f"{base}/fetch",
                params={"url": f"{site}/p/{i}", "timeout": "30", "json_response": "true", **params},
                headers={"X-API-Key": KEY},
            )
            answer = resp.json()
            ok = resp.status_code == 200 and "error" not in answer
            if ok and render and 'data-done="1"' not in answer["body"]:
                ok = False
            failed += not ok
            done += 1

    async def sample() -> None:
        reported = 0
        while True:
            rss.append(await asyncio.to_thread(tree_rss, gateway.pid) / 2**20)
            if n >= 1000 and done >= reported + n // 10:  # a long run shows its memory as it goes
                reported = done
                print(f"  {label}: {done} pages, gateway PSS {rss[-1]:.0f} MB", file=sys.stderr, flush=True)
            await asyncio.sleep(0.5)

    cpu_before, python_before = tree_cpu(gateway.pid), cpu_seconds(gateway.pid)
    started = time.monotonic()
    sampler = asyncio.create_task(sample())
    async with httpx.AsyncClient(
        trust_env=False, timeout=60, limits=httpx.Limits(max_connections=concurrency)
    ) as c:
        await asyncio.gather(*(worker(c) for _ in range(concurrency)))
    seconds = time.monotonic() - started
    sampler.cancel()
    cpu, python = tree_cpu(gateway.pid) - cpu_before, cpu_seconds(gateway.pid) - python_before
    rss.append(tree_rss(gateway.pid) / 2**20)
    first = rss[max(len(rss) // 10, 0)]
    return Run(label, 0, n, seconds, cpu, python, max(rss), first, rss[-1], failed)


async def bench(renders: int, browser_counts: Sequence[int], contexts: int) -> list[Run]:
    """The runs: for each browser count, plain fetches then renders of the same pages."""
    site_runner = await _site()
    site = f"http://site.test:{site_runner.addresses[0][1]}"
    exit_server = await asyncio.start_server(
        lambda r, w: serve_client(r, w, EXIT_SOURCE), EXIT_LISTEN, 0, backlog=1024
    )
    exit_port = exit_server.sockets[0].getsockname()[1]
    runs: list[Run] = []
    prefix = f"bench-render-{uuid.uuid4().hex[:8]}"
    try:
        for browsers in browser_counts:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "proxies.yaml"
                path.write_text(
                    yaml.safe_dump(
                        {
                            "exits": [
                                {"id": "e0", "url": f"http://{EXIT_LISTEN}:{exit_port}", "max_inflight": 1000}
                            ],
                            "keys": [{"id": "bench", "key_env": "BENCH_RENDER_KEY", "max_concurrency": 1000}],
                            "min_interval": 0,
                            "resolve": {"site.test": SITE},
                            "allow_networks": [f"{SITE}/32"],
                            "render": {"browsers": browsers, "contexts": contexts},
                        }
                    )
                )
                port = _free_port()
                gateway = await _gateway(path, port, prefix)
                base = f"http://{GATEWAY}:{port}"
                try:
                    concurrency = browsers * contexts
                    plain = await measure("plain", base, site, gateway, renders, concurrency, False)
                    plain.browsers = browsers
                    await measure("warm-up", base, site, gateway, concurrency * 2, concurrency, True)
                    rendered = await measure("rendered", base, site, gateway, renders, concurrency, True)
                    rendered.browsers = browsers
                    runs += [plain, rendered]
                    print(_row(plain), _row(rendered), sep="\n", flush=True)
                finally:
                    gateway.send_signal(signal.SIGTERM)
                    gateway.wait(timeout=60)
    finally:
        exit_server.close()
        await site_runner.cleanup()
        redis = Redis.from_url(REDIS_URL)
        async for key in redis.scan_iter(f"{prefix}:*"):
            await redis.delete(key)
        await redis.aclose()
    return runs


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind((GATEWAY, 0))
        return int(s.getsockname()[1])


HEADER = (
    "| run | browsers | pages | pages/s | pages/s per browser | gateway CPU-ms per page (Python) "
    "| peak PSS MB | PSS MB after 10 % / at the end | failed |\n|---|---|---|---|---|---|---|---|---|"
)


def _row(run: Run) -> str:
    return (
        f"| {run.label} | {run.browsers} | {run.pages} | {run.rate:.1f} | {run.rate / run.browsers:.1f} "
        f"| {1000 * run.cpu / run.pages:.1f} ({1000 * run.cpu_python / run.pages:.1f}) "
        f"| {run.peak_rss_mb:.0f} | {run.rss_first_mb:.0f} / {run.rss_last_mb:.0f} | {run.failed} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    """Run the bench and print its table."""
    parser = argparse.ArgumentParser(prog="python -m bench.render", description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=300, help="pages per run (default 300)")
    parser.add_argument("--browsers", default="1,2", help="browser counts to run (default 1,2)")
    parser.add_argument("--contexts", type=int, default=4, help="renders at once per browser (default 4)")
    args = parser.parse_args(argv)
    counts = [int(b) for b in args.browsers.split(",")]
    print(HEADER, flush=True)
    runs = asyncio.run(bench(args.renders, counts, args.contexts))
    loads = os.getloadavg()
    print(f"\nload average at the end: {loads[0]:.1f} on {os.cpu_count()} CPUs")
    for run in runs:
        if run.label == "rendered" and run.rate / run.browsers < TARGET_PER_BROWSER:
            print(f"below the target of {TARGET_PER_BROWSER:g} rendered pages/s per browser: {_row(run)}")


if __name__ == "__main__":
    main()
