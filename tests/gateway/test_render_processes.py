"""No Chromium outlives crawler-gateway: stopped by SIGTERM (it closes its browsers), killed by
SIGKILL (no cleanup runs), or killed with Playwright's driver while the browsers hang (no one is
left to close them, and they would not notice: the kernel ends them, tied to their parent by
setpriv --pdeathsig)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from crawler.gateway.render.browsers import MARKER
from crawler.gateway.render.processes import alive, cmdline, descendants
from crawler.settings import Settings
from demo.site import free_port
from tests.support.browser import chromium
from tests.support.exits import ForwardProxy, write_proxies
from tests.support.services import REDIS_URL, crawler_command, env_for
from tests.support.wait import until


async def _browsers(port: int) -> int:
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            render = (await client.get(f"http://127.0.0.48:{port}/healthz")).json().get("render") or {}
    except (httpx.HTTPError, ValueError):
        return 0
    return int(render.get("browsers", 0))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how", ["sigterm", "sigkill", "sigkill-with-driver-and-hung-browsers"])
async def test_no_chromium_is_left_behind(tmp_path: Path, prefix: str, how: str) -> None:
    exit_proxy = await ForwardProxy("127.0.0.41", "127.0.0.42").start()
    path = write_proxies(
        tmp_path / "p.yaml", [exit_proxy], render={"browsers": 2, "contexts": 1, "executable": chromium()}
    )
    settings = Settings("amqp://unused", REDIS_URL, "sqlite://", str(tmp_path / "none.yaml"), prefix)
    port = free_port("127.0.0.48")
    gateway = subprocess.Popen(
        crawler_command("crawler-gateway", "--listen", f"127.0.0.48:{port}", "--proxies", str(path)),
        env=env_for(settings) | {"GW_TEST_KEY": "k-0123456789abcdef"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    below: list[int] = []
    try:
        await until(lambda: _browsers(port), lambda n: n == 2, what="two browsers up", within=150)
        below = descendants(gateway.pid)
        browsers = [p for p in below if any(a.startswith(MARKER) for a in cmdline(p))]
        assert len(browsers) >= 2 and len(below) > len(browsers), (below, browsers)
        if how.startswith("sigkill-with-driver"):
            drivers = [p for p in below if "run-driver" in cmdline(p)]
            assert drivers, [cmdline(p) for p in below]
            for pid in browsers:
                os.kill(pid, signal.SIGSTOP)  # hung: closing their pipe would not end them
            for pid in drivers:
                os.kill(pid, signal.SIGKILL)
        gateway.send_signal(signal.SIGTERM if how == "sigterm" else signal.SIGKILL)
        # Its exit, not the end of its pipes: a process left behind (what this test looks for) may
        # hold them open, and is then named by the check below rather than hanging this wait.
        await asyncio.to_thread(gateway.wait, 60)
        await until(
            lambda: [p for p in below if alive(p)],
            lambda left: not left,
            what="every process gone",
            within=30,
        )
        _, err = gateway.communicate(timeout=30)
        assert gateway.returncode == (0 if how == "sigterm" else -signal.SIGKILL), err
    finally:
        if gateway.poll() is None:
            gateway.kill()
        for pid in [p for p in below if alive(p)]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)  # a failed test leaves nothing running either
        with contextlib.suppress(subprocess.TimeoutExpired):
            gateway.communicate(timeout=30)
        for pipe in (gateway.stdout, gateway.stderr):  # closed even if something still holds them
            if pipe is not None:
                pipe.close()
        await exit_proxy.close()
