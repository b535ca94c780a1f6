"""The `private_redis` fixture: a redis-server of the test's own (bench/redis_server.py), restarted
empty on the same address to lose everything mid-crawl; never the shared one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.redis_server import PrivateRedis

__all__ = ["PrivateRedis", "private_redis"]


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
