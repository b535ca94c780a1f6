"""The gateway tests' exits and in-process gateways."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from redis.asyncio import Redis

from crawler.gateway.server import Gateway
from crawler.names import Names
from tests.support.exits import ENV, SOURCES, ForwardProxy, Start, write_proxies


@pytest.fixture
async def proxies() -> AsyncIterator[list[ForwardProxy]]:
    made = [await ForwardProxy("127.0.0.41", src).start() for src in SOURCES]
    yield made
    for p in made:
        await p.close()


@pytest.fixture
async def gateway(tmp_path: Path, redis: Redis, prefix: str) -> AsyncIterator[Start]:
    runners: list[web.AppRunner] = []

    async def start(proxies: list[ForwardProxy], env: dict[str, str] | None = None, **settings: Any) -> str:
        path = write_proxies(tmp_path / f"proxies{len(runners)}.yaml", proxies, **settings)
        gw = Gateway(redis, Names(prefix), str(path), ENV | (env or {}))
        # A handler still at work when the test ends (a client gone mid-stream) is cancelled after
        # 5 s, not aiohttp's 60: the teardown stays within the test's timeout.
        runner = web.AppRunner(gw.app(), access_log=None, shutdown_timeout=5)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.41", 0).start()
        runners.append(runner)
        return f"http://127.0.0.41:{runner.addresses[0][1]}"

    yield start
    for runner in runners:
        await runner.cleanup()
