"""An S3-compatible server on loopback, moto's server mode in a process of its own: for the benchmarks
and the tests (tests/support/s3.py), never the crawler."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

# Credentials moto takes (any). Set for a process and its children, boto3's standard chain finds them
# first, so nothing asks a metadata service off loopback.
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on `host` just now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True, slots=True)
class MotoServer:
    """moto_server, answering at `endpoint`."""

    endpoint: str
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Stop it."""
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def start_moto(host: str = "127.0.0.1", port: int | None = None) -> MotoServer:
    """moto_server on `host`, once it answers."""
    port = port or free_port(host)
    process = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://{host}:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(f"{endpoint}/moto-api/", timeout=1, trust_env=False).status_code == 200:
                return MotoServer(endpoint, process)
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError(f"moto_server did not answer on {endpoint}: is moto[server] installed?")
        time.sleep(0.05)  # a server starting: polled


@contextmanager
def moto() -> Iterator[MotoServer]:
    """A moto server for the block, with its credentials in this process's environment."""
    saved = {key: os.environ.get(key) for key in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    server = start_moto()
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
