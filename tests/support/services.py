"""Real services for the tests, each test isolated: its own vhost, key prefix and database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

import httpx
import redis

from crawler.settings import ENV, Settings
from tests.support.wait import until

if TYPE_CHECKING:
    import aio_pika.abc

AMQP_HOST = os.environ.get("CRAWLER_TEST_AMQP_HOST", "localhost")
MANAGEMENT = f"http://{AMQP_HOST}:15672"
REDIS_URL = os.environ.get("CRAWLER_TEST_REDIS_URL", "redis://localhost:6379/0")
AUTH = ("guest", "guest")
REPO = Path(__file__).resolve().parents[2]


@contextmanager
def vhost() -> Iterator[str]:
    """A fresh RabbitMQ vhost (guest may use it); yields its AMQP URL, deletes it after."""
    name = f"crawler-test-{uuid.uuid4().hex[:12]}"
    with httpx.Client(base_url=MANAGEMENT, auth=AUTH, timeout=30, trust_env=False) as api:
        api.put(f"/api/vhosts/{name}").raise_for_status()
        api.put(
            f"/api/permissions/{name}/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
        ).raise_for_status()
        try:
            yield f"amqp://guest:guest@{AMQP_HOST}:5672/{quote(name, safe='')}"
        finally:
            api.delete(f"/api/vhosts/{name}")


def queue_info(amqp_url: str, queue: str) -> dict[str, object]:
    """The management API's view of a queue (messages, consumers, arguments)."""
    vhost_name = amqp_url.rsplit("/", 1)[1]
    with httpx.Client(base_url=MANAGEMENT, auth=AUTH, timeout=30, trust_env=False) as api:
        resp = api.get(f"/api/queues/{vhost_name}/{quote(queue, safe='')}")
        resp.raise_for_status()
        info: dict[str, object] = resp.json()
        return info


async def close_connection(amqp_url: str) -> None:
    """Close, from the broker's side (the management API), the first connection of `amqp_url`'s vhost
    once it is listed: what a lost connection looks like to its client."""
    vhost = amqp_url.rsplit("/", 1)[1]
    async with httpx.AsyncClient(base_url=MANAGEMENT, auth=AUTH, trust_env=False) as api:

        async def listed() -> list[str]:
            return [c["name"] for c in (await api.get(f"/api/vhosts/{vhost}/connections")).json()]

        mine = await until(listed, what="the connection listed by the management API")
        (await api.delete(f"/api/connections/{quote(mine[0], safe='')}")).raise_for_status()


@contextmanager
def key_prefix() -> Iterator[str]:
    """A fresh Redis key prefix; its keys are deleted after."""
    prefix = f"t{uuid.uuid4().hex[:10]}"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        try:
            keys = list(client.scan_iter(f"{prefix}:*"))
            if keys:
                client.delete(*keys)
        finally:
            client.close()


def settings_for(
    amqp_url: str, prefix: str, database_url: str, config_path: Path, archive_dir: Path | None = None
) -> Settings:
    """Settings pointing at the test's own services (and WARC directory: by default, beside its config)."""
    return Settings(
        amqp_url=amqp_url,
        redis_url=REDIS_URL,
        database_url=database_url,
        config_path=str(config_path),
        prefix=prefix,
        archive_dir=str(archive_dir or config_path.parent / "archive"),
        archive_spool=str(config_path.parent / "archive-spool"),
    )


def env_for(settings: Settings) -> dict[str, str]:
    """The environment a crawler subprocess needs to use `settings`: every setting, none inherited."""
    env = dict(os.environ, PYTHONWARNINGS="error")
    for name, var in ENV.items():
        value = getattr(settings, name)
        if value is None:
            env.pop(var, None)
        else:
            env[var] = value
    return env


def crawler_command(entry: str, *args: str) -> list[str]:
    """argv running a console script of this package with the test's Python."""
    func = {
        "crawler": "crawler",
        "crawler-consume": "consume",
        "crawler-gateway": "gateway",
        "crawler-api": "api",
        "crawler-scheduler": "scheduler",
    }[entry]
    # The tripwire first: whatever the crawler does, it connects nowhere but loopback. Then the
    # program as its console script starts it: through crawler/launch.py.
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); "
        "from tests.support import tripwire; tripwire.install(); "
        f"from crawler.launch import {func}; sys.exit({func}())"
    )
    return [sys.executable, "-c", code, *args]


def run(
    entry: str, args: Sequence[str], settings: Settings, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run a crawler command to completion and capture its output."""
    return subprocess.run(
        crawler_command(entry, *args),
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


async def drain(
    channel: aio_pika.abc.AbstractChannel, queue: str
) -> list[aio_pika.abc.AbstractIncomingMessage]:
    """Take and ack every ready message of `queue`, in order."""
    declared = await channel.get_queue(queue)
    out = []
    while (message := await declared.get(fail=False)) is not None:
        await message.ack()
        out.append(message)
    return out


async def queue_depth(amqp_url: str, queue: str) -> int:
    """Ready messages in a queue, asked of the broker itself (the management API lags)."""
    import aio_pika

    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        declared = await channel.declare_queue(queue, passive=True)
        return declared.declaration_result.message_count or 0


async def consumers(amqp_url: str, queue: str) -> int:
    """Consumers of a queue, asked of the broker itself (0 if there is no such queue)."""
    import aio_pika

    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return 0
        return declared.declaration_result.consumer_count or 0


def unacked(amqp_url: str, queue: str) -> int:
    """Messages of a queue delivered and not yet acked, asked of the node itself (the management
    API's figures are up to 5 s old)."""
    vhost_name = unquote(amqp_url.rsplit("/", 1)[1])
    out = subprocess.run(
        ["rabbitmqctl", "list_queues", "-p", vhost_name, "name", "messages_unacknowledged", "--quiet"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    for line in out.splitlines():
        name, _, count = line.rpartition("\t")
        if name == queue:
            return int(count)
    raise AssertionError(f"queue {queue!r} not found in vhost {vhost_name!r}: {out!r}")
