"""`crawler frontier migrate` re-making queues of another mode: the host layout's, made lazy."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import pytest
import yaml

from crawler import connections
from crawler.config import load_config
from crawler.errors import CrawlerError
from crawler.frontier.exchanges import Topology, declare, topology
from crawler.frontier.message import persistent
from crawler.names import HOST_SHARD_WORD, HOST_WAITS, Names
from crawler.service.migration import migrate_frontier
from tests.support.services import queue_info, run, settings_for

SHARDS = 2


def in_memory(topo: Topology) -> Topology:
    """`topo` as a crawler made it that kept every queue's messages in memory."""
    queues = tuple(
        dataclasses.replace(q, arguments={k: v for k, v in q.arguments.items() if k != "x-queue-mode"})
        for q in topo.queues
    )
    return Topology(topo.exchanges, queues)


def mode(amqp_url: str, queue: str) -> object:
    """`queue`'s x-queue-mode argument, as the broker holds it."""
    arguments = queue_info(amqp_url, queue)["arguments"]
    assert isinstance(arguments, dict)
    return arguments.get("x-queue-mode")


@pytest.mark.timeout(120)
async def test_migrate_makes_the_host_layouts_queues_lazy_and_keeps_their_messages(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    path = tmp_path / "domains.yaml"
    discover = {"follow": "all", "allow": [".test"], "shards": SHARDS}
    path.write_text(yaml.safe_dump({"domains": {"a.test": {}}, "discover": discover}))
    config, names = load_config(path), Names(prefix)
    shard = names.host_shard(1)
    sent = {f"http://h{n}.test/".encode(): n % 10 for n in range(300)}
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await declare(channel, in_memory(topology(config, names)))
        frontier = await channel.get_exchange(names.frontier)
        for body, priority in sent.items():
            key = f"{body.decode()[7:-1]}.{HOST_SHARD_WORD}1"
            await frontier.publish(persistent(body, priority), routing_key=key)
        refused = await connection.channel()
        with pytest.raises(CrawlerError, match=r"queue's mode differs.*crawler frontier migrate"):
            await declare(refused, topology(config, names))

    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    migrated = await asyncio.to_thread(run, "crawler", ["frontier", "migrate"], settings, 60)
    assert migrated.returncode == 0, migrated.stderr
    assert f"{shard}: re-made as classic, {len(sent)} message(s) moved" in migrated.stdout
    for queue in (shard, names.host_shard(0), *(names.host_wait(w) for w in HOST_WAITS)):
        assert mode(amqp_url, queue) == "lazy", queue
    assert mode(amqp_url, names.domain_queue("a.test")) is None

    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        await declare(channel, topology(config, names))  # as every process does: accepted now
        queue = await channel.declare_queue(shard, passive=True)
        got: dict[bytes, int] = {}
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            got[message.body] = message.priority or 0
    assert got == sent  # every message, each at its priority
    again = await asyncio.to_thread(run, "crawler", ["frontier", "migrate"], settings, 60)
    assert again.returncode == 0 and "re-made" not in again.stdout, again.stdout


@pytest.mark.timeout(120)
async def test_a_queue_waits_on_disk_while_it_is_remade_and_a_run_cut_short_resumes(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "domains.yaml"
    discover = {"follow": "all", "allow": [".test"], "shards": SHARDS}
    path.write_text(yaml.safe_dump({"domains": {"a.test": {}}, "discover": discover}))
    config, names = load_config(path), Names(prefix)
    shard, cut_short = names.host_shard(1), names.host_shard(0)
    sent = {f"http://h{n}.test/".encode() for n in range(20)}
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)
        await declare(channel, in_memory(topology(config, names)))
        frontier = await channel.get_exchange(names.frontier)
        for body in sent:
            key = f"{body.decode()[7:-1]}.{HOST_SHARD_WORD}1"
            await frontier.publish(persistent(body, 0), routing_key=key)
        # Shard 0's holding queue as an earlier run left it, made in memory, one message in it.
        left = await channel.declare_queue(f"{cut_short}.migrating", durable=True)
        into = await channel.declare_exchange(f"{prefix}.test-in", aio_pika.ExchangeType.TOPIC)
        await left.bind(into, "#")
        await into.publish(persistent(b"http://left.test/", 0), routing_key=f"left.test.{HOST_SHARD_WORD}0")
        await into.delete()

    holding: list[object] = []  # shard 1's holding queue's mode, each time a migration channel opens
    opened = connections.publishing_channel

    async def watched(connection: Any) -> Any:
        with contextlib.suppress(httpx.HTTPStatusError):  # not there (yet, or any more)
            holding.append(await asyncio.to_thread(mode, amqp_url, f"{shard}.migrating"))
        return await opened(connection)

    monkeypatch.setattr(connections, "publishing_channel", watched)
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    await migrate_frontier(settings, config, None)
    assert holding == ["lazy"]  # made for shard 1, on disk, and gone once it was re-made
    got: dict[str, set[bytes]] = {}
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        for name in (shard, cut_short):
            assert mode(amqp_url, name) == "lazy", name
            queue = await channel.declare_queue(name, passive=True)
            got[name] = set()
            while (message := await queue.get(no_ack=True, fail=False)) is not None:
                got[name].add(message.body)
    assert got == {shard: sent, cut_short: {b"http://left.test/"}}
