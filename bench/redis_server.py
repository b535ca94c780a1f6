"""A private redis-server for runs that lose Redis (the tests, bench.chaos): it keeps nothing on disk,
so a restart is empty, unless it is told to save first.

The shared Redis on :6379 is never restarted; a run that needs Redis to vanish mid-crawl gets its own
server on a free loopback port and restarts it (SHUTDOWN NOSAVE, then start) on the same address.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import redis

from demo.site import free_port

HOST = "127.0.0.1"
START_WITHIN = 10.0


class PrivateRedis:
    """One redis-server process on HOST, no persistence; `restart_empty` loses everything it held."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed: scripts/services installs it")
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

    def stop(self, save: bool = False) -> None:
        """SHUTDOWN NOSAVE: the server exits and everything it held is gone (with `save`: SHUTDOWN
        SAVE, and the next start reads it back)."""
        if self._process is None:
            return
        client = redis.Redis(host=HOST, port=self.port, socket_connect_timeout=1)
        try:
            client.shutdown(save=save, nosave=not save)
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
        self._forget()
        self.start()
        self.restarts += 1

    def restart_kept(self) -> None:
        """Stop and start again on the same address with what it held: a Redis that persists."""
        self.stop(save=True)
        self.start()
        self.restarts += 1

    def _forget(self) -> None:
        (self._directory / "dump.rdb").unlink(missing_ok=True)

    def keys(self) -> int:
        """How many keys it holds."""
        client = redis.Redis(host=HOST, port=self.port)
        try:
            return int(client.dbsize())
        finally:
            client.close()
