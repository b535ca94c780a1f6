"""Worker heartbeats in the real Redis: live, late, gone, and removed on a clean stop."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from dataclasses import asdict

import pytest
from redis.asyncio import Redis

from crawler.monitor.heartbeat import Heartbeat, WorkerStatus, workers
from crawler.monitor.liveness import renew
from crawler.monitor.metrics import Metrics
from crawler.names import GONE_KEPT, Names
from tests.support.wait import until


def heartbeat(redis: Redis, prefix: str, ttl: float, metrics: Metrics | None = None) -> Heartbeat:
    return Heartbeat(
        redis, Names(prefix), lambda: ["a.test", "b.test"], metrics or Metrics(), role="test", ttl=ttl
    )


async def test_a_beat_shows_the_worker_live_with_what_it_did(redis: Redis, prefix: str) -> None:
    metrics = Metrics()
    metrics.observe_outcome("a.test", "ok", 200)
    metrics.observe_outcome("b.test", "failed", 404)
    beat = heartbeat(redis, prefix, 30, metrics)
    await beat.beat()
    [found] = await workers(redis, Names(prefix))
    assert found.state == "live"
    assert found.age is not None and 0 <= found.age < 10
    w = found.worker
    assert (w.host, w.pid, w.role, w.domains, w.pages) == (
        socket.gethostname(),
        os.getpid(),
        "test",
        ["a.test", "b.test"],
        2,
    )
    assert w.id == beat.id and w.ttl == 30
    assert 0 < await redis.pttl(Names(prefix).worker_key(beat.id)) <= 30_000
    assert metrics.registry.get_sample_value("crawler_heartbeat_timestamp_seconds") == w.beat


async def test_two_heartbeats_of_one_process_keep_apart(redis: Redis, prefix: str) -> None:
    one, two = heartbeat(redis, prefix, 30), heartbeat(redis, prefix, 30)
    await one.beat()
    await two.beat()
    assert one.id != two.id
    assert len(await workers(redis, Names(prefix))) == 2


async def test_a_worker_that_stops_beating_is_gone_after_its_ttl(redis: Redis, prefix: str) -> None:
    beat = heartbeat(redis, prefix, 0.5)
    await beat.beat()  # and never again, as if killed
    gone: list[WorkerStatus] = await until(
        lambda: workers(redis, Names(prefix)),
        lambda found: [w.state for w in found] == ["gone"],
        within=10,
        what="the worker to show as gone",
    )
    assert gone[0].age is None and gone[0].worker.id == beat.id


async def test_a_worker_that_missed_beats_is_late(redis: Redis, prefix: str) -> None:
    beat = heartbeat(redis, prefix, 3)
    await beat.beat()
    # As if its last beat were 2.5 s old: past two beat intervals (2 s), within the TTL.
    await redis.pexpire(Names(prefix).worker_key(beat.id), 500)
    [found] = await workers(redis, Names(prefix))
    assert found.state == "late"


async def test_run_beats_until_cancelled_then_removes_the_worker(redis: Redis, prefix: str) -> None:
    metrics = Metrics()
    beat = heartbeat(redis, prefix, 0.3, metrics)
    task = asyncio.create_task(beat.run())
    # Pages done since the previous beat show up in the next one.
    await until(lambda: workers(redis, Names(prefix)), lambda f: len(f) == 1, within=10, what="a beat")
    metrics.observe_outcome("a.test", "ok", 200)
    await until(
        lambda: workers(redis, Names(prefix)),
        lambda f: len(f) == 1 and f[0].worker.pages == 1 and f[0].state == "live",
        within=10,
        what="a later beat with the page",
    )
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert await workers(redis, Names(prefix)) == []
    assert not await redis.exists(Names(prefix).worker_key(beat.id))


async def test_workers_gone_for_long_are_forgotten_at_the_next_start(redis: Redis, prefix: str) -> None:
    names = Names(prefix)
    old = heartbeat(redis, prefix, 30).record()
    ancient = {**asdict(old), "id": "old-host:1:abc", "beat": time.time() - GONE_KEPT - 60}
    recent = {**asdict(old), "id": "old-host:2:abc", "beat": time.time() - 60}
    await redis.hset(names.workers_key, mapping={"old-host:1:abc": json.dumps(ancient)})
    await redis.hset(names.workers_key, mapping={"old-host:2:abc": json.dumps(recent)})
    await redis.hset(names.workers_key, mapping={"garbage": b"not json"})
    beat = heartbeat(redis, prefix, 30)
    task = asyncio.create_task(beat.run())
    try:
        found = await until(
            lambda: workers(redis, names),
            lambda f: {w.worker.id for w in f} == {beat.id, "old-host:2:abc"},
            within=10,
            what="the ancient record forgotten, the recent one kept",
        )
        assert {w.worker.id: w.state for w in found} == {beat.id: "live", "old-host:2:abc": "gone"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_renewal_stops_when_cancelled_even_if_a_write_swallows_the_cancellation(
    redis: Redis, prefix: str
) -> None:
    # A Redis call cut short by the cancellation may swallow the CancelledError (seen in
    # crawler-gateway, whose SIGTERM then hung on its report for good): the renewal stops anyway,
    # and still removes its record.
    key = f"{prefix}:renewed"
    writing = asyncio.Event()

    async def write() -> None:
        await redis.set(key, "1")
        writing.set()
        with contextlib.suppress(asyncio.CancelledError):  # what a library cut short may do
            await asyncio.sleep(30)

    async def remove() -> None:
        await redis.delete(key)

    async def tidy() -> None:
        return None

    task = asyncio.create_task(renew(write, remove, tidy, 0.05, 10, "test record"))
    await writing.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert not await redis.exists(key)
