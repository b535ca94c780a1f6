"""Gateway replicas' reports in the real Redis: exits dead, cooling or healthy, keys' credits against
their budgets; live, late, gone; removed on a clean stop, and published by a running gateway."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from crawler.gateway.pool import Pool
from crawler.gateway.proxies import ProxiesConfig
from crawler.gateway.report import (
    ExitState,
    GatewayStatus,
    KeyState,
    Reporter,
    gateways,
    read_exits,
)
from crawler.gateway.server import Gateway
from crawler.names import GONE_KEPT, Names
from tests.support.exits import ENV, ForwardProxy, write_proxies
from tests.support.wait import until

pytestmark = pytest.mark.timeout(60)


def config(*exits: str, **settings: Any) -> ProxiesConfig:
    return ProxiesConfig.model_validate(
        {
            "exits": [{"id": e, "url": f"http://127.0.0.41:{i + 1}"} for i, e in enumerate(exits)],
            "keys": [{"id": "paid", "key_env": "K", "budget": 10}, {"id": "free", "key_env": "K"}],
            **settings,
        }
    )


def reporter(redis: Redis, prefix: str, ttl: float, conf: ProxiesConfig | None = None) -> Reporter:
    fixed = conf or config("e0")
    return Reporter(redis, Names(prefix), lambda: fixed, ttl=ttl)


async def test_exits_dead_cooling_or_healthy_and_keys_against_their_budgets(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    # e10's cooldown keys start with e1's id: each must go to its own exit.
    conf = config("e0", "e1", "e10")
    await redis.set(names.gw_dead_key("e0"), "1", px=30_000)
    await redis.set(names.gw_cool_key("e0", "a.test"), "1", px=20_000)
    await redis.set(names.gw_cool_key("e1", "b.test"), "1", px=20_000)
    await redis.set(names.gw_cool_key("e1", "a.test"), "1", px=5_000)
    await redis.set(names.gw_cool_key("gone-exit", "a.test"), "1", px=20_000)  # not in proxies.yaml
    await redis.set(names.gw_fails_key("e10"), 2)  # failures short of dead_after: still healthy
    await redis.incrbyfloat(names.gw_credits_key("paid"), 2.5)
    await redis.incrbyfloat(names.gw_credits_key("paid"), 1)

    exits = await read_exits(redis, names, conf)
    assert [(e.id, e.state, e.cooling) for e in exits] == [
        ("e0", "dead", ["a.test"]),  # dead, whatever it cools down for
        ("e1", "cooling", ["a.test", "b.test"]),
        ("e10", "healthy", []),
    ]
    assert exits[0].dead_for is not None and 25 < exits[0].dead_for <= 30
    assert exits[1].dead_for is None and exits[2].dead_for is None

    beat = reporter(redis, prefix, 15, conf)
    published = await beat.publish()
    [found] = await gateways(redis, names)
    assert found.state == "live" and found.age is not None and 0 <= found.age < 5
    report = found.report
    assert report == published  # through JSON and back, whole
    assert (report.id, report.ttl) == (beat.id, 15)
    assert (report.host, report.pid) == (socket.gethostname(), os.getpid())
    assert [(e.id, e.state) for e in report.exits] == [("e0", "dead"), ("e1", "cooling"), ("e10", "healthy")]
    assert report.keys == [KeyState("paid", 3.5, 10.0), KeyState("free", 0.0, None)]
    assert 0 < await redis.pttl(names.gateway_key(beat.id)) <= 15_000


async def test_an_exit_is_dead_until_it_answers_not_only_until_its_dead_time_ends(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    conf = config("e0")
    pool = Pool(redis, names, conf)
    (exit,) = conf.exits
    for n in range(conf.dead_after):  # its proxy fails every request, of both keys: dead for dead_for
        await pool.settle(conf.keys[n % 2], f"r{n}", exit, "a.test", "failed", 0, final=True)
    assert [e.state for e in await read_exits(redis, names, conf)] == ["dead"]
    await redis.delete(names.gw_dead_key("e0"))  # its dead time is over; nothing went through it since
    assert [(e.state, e.dead_for) for e in await read_exits(redis, names, conf)] == [("dead", None)]
    await pool.settle(conf.keys[0], "r", exit, "a.test", "answered", 0, final=True)
    # It answered: alive again (the cooldown its failures gave a.test runs out on its own).
    assert [e.state for e in await read_exits(redis, names, conf)] == ["cooling"]


async def test_a_report_not_renewed_is_gone_after_its_ttl(redis: Redis, prefix: str) -> None:
    beat = reporter(redis, prefix, 0.5)
    await beat.publish()  # and never again, as if killed
    gone: list[GatewayStatus] = await until(
        lambda: gateways(redis, Names(prefix)),
        lambda found: [g.state for g in found] == ["gone"],
        within=30,
        what="the replica to show as gone",
    )
    assert gone[0].age is None and gone[0].report.id == beat.id
    assert gone[0].report.exits == [ExitState("e0", "healthy", [], None)]


async def test_a_replica_that_missed_two_reports_is_late(redis: Redis, prefix: str) -> None:
    beat = reporter(redis, prefix, 3)
    await beat.publish()
    # As if its last report were 2.5 s old: past two report intervals (2 s), within the TTL.
    await redis.pexpire(Names(prefix).gateway_key(beat.id), 500)
    [found] = await gateways(redis, Names(prefix))
    assert found.state == "late"


async def test_run_follows_the_config_until_cancelled_then_removes_the_report(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    current = [config("e0")]
    beat = Reporter(redis, names, lambda: current[0], ttl=0.6)
    task = asyncio.create_task(beat.run())
    await until(lambda: gateways(redis, names), lambda f: len(f) == 1, within=30, what="a report")
    current[0] = config("e0", "e1")  # proxies.yaml reloaded: the next report has both exits
    await until(
        lambda: gateways(redis, names),
        lambda f: len(f) == 1 and f[0].state == "live" and [e.id for e in f[0].report.exits] == ["e0", "e1"],
        within=30,
        what="a later report with the reloaded exits",
    )
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await gateways(redis, names) == []
    assert not await redis.exists(names.gateway_key(beat.id))


async def test_long_gone_replicas_are_forgotten_and_unreadable_ones_skipped(
    redis: Redis, prefix: str
) -> None:
    names = Names(prefix)
    old = await reporter(redis, prefix, 15).report()
    ancient = {**asdict(old), "id": "old-host:1:abc", "beat": time.time() - GONE_KEPT - 60}
    recent = {**asdict(old), "id": "old-host:2:abc", "beat": time.time() - 60}
    bad_state = {**asdict(old), "id": "old-host:3:abc", "exits": [{**asdict(old.exits[0]), "state": "odd"}]}
    await redis.hset(
        names.gateways_key,
        mapping={
            "old-host:1:abc": json.dumps(ancient),
            "old-host:2:abc": json.dumps(recent),
            "old-host:3:abc": json.dumps(bad_state),
            "garbage": b"not json",
            "list": b"[]",
        },
    )
    beat = reporter(redis, prefix, 15)
    task = asyncio.create_task(beat.run())
    try:
        found = await until(
            lambda: gateways(redis, names),
            lambda f: {g.report.id for g in f} == {beat.id, "old-host:2:abc"},
            within=30,
            what="the ancient report forgotten, the recent one kept",
        )
        assert [(g.report.id, g.state) for g in found] == [(beat.id, "live"), ("old-host:2:abc", "gone")]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_redis_error_skips_a_report_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="crawler.gateway.report")
    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    away = Redis(host="127.0.0.1", port=port, retry=Retry(NoBackoff(), 0))  # fail at once
    try:
        task = asyncio.create_task(reporter(away, "unused", 0.3).run())
        await until(
            lambda: [r for r in caplog.records if "report not written" in r.getMessage()],
            lambda found: len(found) >= 2,
            within=20,
            what="two reports skipped, the loop still running",
        )
        assert not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await away.aclose()
    assert any("report not removed" in r.getMessage() for r in caplog.records)


async def test_a_running_gateway_reports_itself_and_a_clean_stop_removes_it(
    tmp_path: Path, redis: Redis, prefix: str, proxies: list[ForwardProxy]
) -> None:
    names = Names(prefix)
    path = write_proxies(tmp_path / "proxies.yaml", proxies)
    gw = Gateway(redis, names, str(path), ENV)
    runner = web.AppRunner(gw.app(), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.41", 0).start()
        found = await until(
            lambda: gateways(redis, names),
            lambda f: [g.report.id for g in f] == [gw.reporter.id],
            within=20,
            what="the gateway's report",
        )
        [status] = found
        assert status.state == "live"
        assert [(e.id, e.state) for e in status.report.exits] == [
            ("e0", "healthy"),
            ("e1", "healthy"),
            ("e2", "healthy"),
        ]
        assert status.report.keys == [KeyState("test", 0.0, None)]
    finally:
        await runner.cleanup()
    assert await gateways(redis, names) == []
    assert not await redis.hexists(names.gateways_key, gw.reporter.id)
    assert not await redis.exists(names.gateway_key(gw.reporter.id))
