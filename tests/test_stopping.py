"""SIGTERM at any moment of a program's start-up is a clean stop: each of the five programs, sent it at
its first instruction, once connected, and once ready, drains and exits 0 with no traceback.

Kubernetes and KEDA send exactly that to a pod that has just started (crawler/stopping.py)."""

from __future__ import annotations

import asyncio
import inspect
import signal
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from redis.asyncio import Redis

from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.sql import migrate
from demo.site import free_port, serve
from tests.support.api import API_IP, TOKENS
from tests.support.services import AUTH, MANAGEMENT, consumers, crawler_command, env_for, settings_for
from tests.support.sites import shops, slow, write_config
from tests.support.wait import until

GATEWAY_IP = "127.0.0.49"
SIGTERM_BIT = 1 << (signal.SIGTERM - 1)


def catches_sigterm(pid: int) -> bool:
    """Whether the process has a handler of its own for SIGTERM (/proc: its first instruction ran)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True  # gone: the exit code tells
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & SIGTERM_BIT)


def connected(amqp_url: str) -> bool:
    """Whether a connection is open in the test's own vhost (so: the program's)."""
    vhost = amqp_url.rsplit("/", 1)[1]
    with httpx.Client(base_url=MANAGEMENT, auth=AUTH, timeout=30, trust_env=False) as api:
        reply = api.get(f"/api/vhosts/{vhost}/connections")
        return reply.status_code == 200 and bool(reply.json())


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2, trust_env=False).status_code < 500
    except httpx.TransportError:
        return False


@dataclass(frozen=True)
class Started:
    """A program just started: its settings and the port it listens on (the API, the gateway)."""

    settings: Settings
    port: int
    pid: int


async def live(s: Started) -> bool:
    async with Redis.from_url(s.settings.redis_url) as redis:
        return bool(await redis.hlen(Names(s.settings.prefix).workers_key))


Point = Callable[[Started], Awaitable[bool] | bool]
POINTS: dict[str, Point] = {
    # Its SIGTERM handler in place: nothing else has run (the interpreter's own start-up is before).
    "first instruction": lambda s: catches_sigterm(s.pid),
    "connected": lambda s: connected(s.settings.amqp_url),
    "live": live,  # its heartbeat sent: the worker, which SIGTERM ended with -15
    "consuming": lambda s: consumers(s.settings.amqp_url, Names(s.settings.prefix).domain_queue("a.test")),
    "api ready": lambda s: answers(f"http://{API_IP}:{s.port}/v1/healthz"),
    "gateway ready": lambda s: answers(f"http://{GATEWAY_IP}:{s.port}/"),
}

CASES = [
    ("crawler-consume", ["first instruction", "connected", "live", "consuming"]),
    ("crawler crawl", ["first instruction", "connected", "consuming"]),
    ("crawler-scheduler", ["first instruction", "connected"]),
    ("crawler-api", ["first instruction", "connected", "api ready"]),
    ("crawler-gateway", ["first instruction", "gateway ready"]),
]


def start(program: str, settings: Settings, tmp_path: Path, port: int) -> subprocess.Popen[str]:
    env = env_for(settings)
    if program == "crawler-api":
        env["CRAWLER_API_TOKENS"] = TOKENS
        argv = crawler_command("crawler-api", "--listen", f"{API_IP}:{port}")
    elif program == "crawler-gateway":
        proxies = tmp_path / "proxies.yaml"
        proxies.write_text(
            yaml.safe_dump(
                {"exits": [{"id": "e", "url": "http://127.0.0.41:9"}], "keys": [{"id": "k", "key_env": "K"}]}
            )
        )
        env["K"] = "a-key-0123456789"
        argv = crawler_command(
            "crawler-gateway", "--listen", f"{GATEWAY_IP}:{port}", "--proxies", str(proxies)
        )
    else:
        argv = crawler_command(*program.split(" ", 1)[:1], *program.split()[1:])
    # A program that hangs is sent SIGABRT: faulthandler then prints where each of its threads is.
    env["PYTHONFAULTHANDLER"] = "1"
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


async def sigterm_at(program: str, point: str, settings: Settings, tmp_path: Path) -> tuple[int, str]:
    """Start `program`, send it SIGTERM once it reached `point`: its exit code and stderr."""
    port = free_port(API_IP if program == "crawler-api" else GATEWAY_IP)
    process = start(program, settings, tmp_path, port)
    started, probe = Started(settings, port, process.pid), POINTS[point]

    async def reached() -> bool:
        if process.poll() is not None:
            return True
        value = probe(started)
        return bool(await value) if inspect.isawaitable(value) else bool(value)

    try:
        await until(reached, within=90, every=0.002, what=f"{program}: {point}")
        assert process.poll() is None, f"{program} exited before {point}: {process.communicate()[1]}"
        process.send_signal(signal.SIGTERM)
        try:
            _, err = await asyncio.to_thread(process.communicate, timeout=90)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            try:
                still = process.communicate(timeout=10)[1]
            except subprocess.TimeoutExpired:
                process.kill()
                still = process.communicate()[1]
            raise AssertionError(f"{program}, SIGTERM at {point}: still running\n{still}") from None
        return process.returncode, err
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


@pytest.mark.timeout(600)
@pytest.mark.parametrize(("program", "points"), CASES, ids=[c[0] for c in CASES])
async def test_sigterm_at_any_point_of_start_up_stops_the_program_cleanly(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, program: str, points: list[str]
) -> None:
    site = shops(products=2, hosts=["a.test"])[0]
    config = write_config(tmp_path / "d.yaml", [site], rate=1, burst=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    await asyncio.to_thread(migrate, sqlite_url)
    with serve(site):
        if program == "crawler crawl":
            program = f"crawler crawl {site.url()}"
            # Each page answers slowly, so no crawl can end before the point its SIGTERM waits for.
            slow(site, 1.5)
        for point in points:
            code, err = await sigterm_at(program, point, settings, tmp_path)
            assert code == 0, f"{program}, SIGTERM at {point}: exit {code}\n{err}"
            assert "Traceback" not in err, err
