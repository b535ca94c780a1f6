"""Connections to RabbitMQ, Redis and the database, opened with one clear error when one is down."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import aio_pika
from aio_pika.abc import AbstractRobustConnection
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from crawler.errors import ServiceUnavailable
from crawler.redact import redact

CONNECT_TIMEOUT = 10.0
REDIS_CONNECTIONS = 64  # per process: Redis answers in microseconds, so more would only queue there
REDIS_WAIT = 60.0  # seconds a command may wait for a free connection before failing
# A command that loses its connection is sent again on a new one, backing off 50 ms, 100 ms ... 1 s:
# ten tries ride out a Redis restart of ~6 s, where failing would have a page fetched again.
REDIS_RETRIES = 10


def process_label(role: str) -> str:
    """Who this process is, for connection names: role, host and pid."""
    return f"{role} {socket.gethostname()} pid {os.getpid()}"


@asynccontextmanager
async def broker(url: str, role: str) -> AsyncIterator[AbstractRobustConnection]:
    """A robust RabbitMQ connection named after this process; it reconnects by itself."""
    try:
        connection = await aio_pika.connect_robust(
            url,
            client_properties={"connection_name": process_label(role)},
            timeout=CONNECT_TIMEOUT,
        )
    except (OSError, TimeoutError, aio_pika.exceptions.AMQPError) as exc:
        raise ServiceUnavailable(
            f"cannot reach RabbitMQ at {redact(url)} ({type(exc).__name__}: {redact(str(exc))}); "
            "is it running? Set CRAWLER_AMQP_URL to its address"
        ) from None
    try:
        yield connection
    finally:
        await connection.close()


@asynccontextmanager
async def redis(url: str) -> AsyncIterator[Redis]:
    """A Redis client that has answered a PING."""
    # redis-py's default pool fails a command outright once 100 are under way (MaxConnectionsError),
    # and a consumer of hundreds of domains has more messages than that in flight: wait for a
    # connection instead.
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=REDIS_CONNECTIONS,
        timeout=REDIS_WAIT,
        socket_connect_timeout=CONNECT_TIMEOUT,
        retry=Retry(ExponentialBackoff(cap=1.0, base=0.05), REDIS_RETRIES),
        retry_on_error=[RedisConnectionError],
    )
    client = Redis.from_pool(pool)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(client.aclose)
        try:
            await asyncio.wait_for(client.ping(), CONNECT_TIMEOUT)
        except (RedisError, OSError, TimeoutError) as exc:
            raise ServiceUnavailable(
                f"cannot reach Redis at {redact(url)} ({type(exc).__name__}: {redact(str(exc))}); "
                "is it running? Set CRAWLER_REDIS_URL to its address"
            ) from None
        yield client
