"""A `crawler-api` process for the tests, on its own loopback address, with one token per scope."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from crawler.settings import Settings
from demo.site import free_port
from tests.support.services import crawler_command, env_for

API_IP = "127.0.0.51"
ADMIN = "admin-token-0123456789abcdef"
READER = "read-token-0123456789abcdef"
TOKENS = f"ops:admin:{ADMIN},dash:read:{READER}"


@dataclass
class Api:
    """A running API: its base URL and process."""

    base: str
    process: subprocess.Popen[str]
    log: str = ""  # its stderr, once stopped

    def client(self, token: str | None = ADMIN) -> httpx.Client:
        """A client of the API sending `token` (none if None)."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=30, trust_env=False)


def start(settings: Settings, port: int, tokens: str = TOKENS) -> subprocess.Popen[str]:
    """Start `crawler-api` on API_IP:port."""
    env = env_for(settings)
    env["CRAWLER_API_TOKENS"] = tokens
    return subprocess.Popen(
        crawler_command("crawler-api", "--listen", f"{API_IP}:{port}"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(base: str, process: subprocess.Popen[str], within: float = 60) -> None:
    """Wait until the API answers /v1/healthz; fail with its stderr if it exits first."""
    import time

    deadline = time.monotonic() + within
    with httpx.Client(base_url=base, timeout=2, trust_env=False) as client:
        while True:
            if process.poll() is not None:
                raise AssertionError(f"crawler-api exited {process.returncode}: {process.stderr.read()}")  # type: ignore[union-attr]
            try:
                if client.get("/v1/healthz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError("crawler-api did not answer /v1/healthz in time")
            time.sleep(0.1)


def stop(process: subprocess.Popen[str]) -> str:
    """Stop the API; its stderr."""
    process.terminate()
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate()
    return err


@contextmanager
def running(settings: Settings, tokens: str = TOKENS) -> Iterator[Api]:
    """A running API for `settings`, stopped after (its stderr then in `log`)."""
    port = free_port(API_IP)
    process = start(settings, port, tokens)
    base = f"http://{API_IP}:{port}"
    api = Api(base, process)
    try:
        wait_ready(base, process)
        yield api
    finally:
        err = api.log = stop(process)
        assert "Traceback" not in err, err
