"""A private redis-server for the tests that lose Redis: it keeps nothing on disk, so a restart is empty.

The shared Redis on :6379 is never restarted; a test that needs Redis to vanish mid-crawl gets its
own server on a free loopback port and restarts it (SHUTDOWN NOSAVE, then start) on the same address.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from demo.site import free_port

HOST = "127.0.0.1"
START_WITHIN = 10.0


class PrivateRedis:
    """One redis-server process on HOST, no persistence; `restart_empty` loses everything it held."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: scripts/services installs it")
        self._binary = binary
        self._directory = directory
        self.port = free_port(HOST)
        self._process: subprocess.Popen[bytes] | None = None
        self.restarts = 0

    @property
    def url(self) -> str:
        """Its redis:// URL."""
        return f"redis://{HOST}:{self.port}/0"

    def _where(self) -> list[str]:
        return [self._binary, "--bind", HOST, "--port", str(self.port), "--dir", str(self._directory)]

    def start(self) -> None:
        """Start the server and wait until it answers a PING."""
        self._process = subprocess.Popen(
            [*self._where(), "--save", "", "--appendonly", "no"],  # nothing on disk: a restart is empty
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + START_WITHIN
        client = redis.Redis(host=HOST, port=self.port, socket_connect_timeout=1)
        try:
            while True:
                try:
                    if client.ping():
                        return
                except redis.ConnectionError:
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        raise
                # Polling a server coming up: this is the condition, not a barrier.
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """SHUTDOWN NOSAVE: the server exits and everything it held is gone."""
        if self._process is None:
            return
        client = redis.Redis(host=HOST, port=self.port, socket_connect_timeout=1)
        try:
            client.shutdown(nosave=True)
        except redis.ConnectionError:
            pass  # it closes the connection as it exits
        finally:
            client.close()
        try:
            self._process.wait(timeout=START_WITHIN)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None

    def restart_empty(self) -> None:
        """Stop and start again on the same address, empty: what a Redis without persistence does."""
        self.stop()
        self.start()
        self.restarts += 1

    def keys(self) -> int:
        """How many keys it holds."""
        client = redis.Redis(host=HOST, port=self.port)
        try:
            return int(client.dbsize())
        finally:
            client.close()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A private, empty redis-server the test may restart; stopped after it."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = PrivateRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
