"""Fixtures shared by the test modules."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aio_pika
import psycopg
import pytest
from psycopg import sql
from redis.asyncio import Redis

from bench.node import Node, private_node
from crawler.fetch.fetcher import BoundedFetcher
from tests.support import services, tripwire

# Fixtures of tests/support modules, usable by every test.
pytest_plugins = [
    "tests.support.redis_server",
    "tests.support.postgres_server",
    "tests.support.sentinel",
    "tests.support.rabbit_cluster",
    "tests.support.s3",
    "tests.support.dnsmasq",
]

# Nothing a test does may connect outside loopback, even if the crawler's own guard fails.
tripwire.install()

# A PostgreSQL server with trust auth; each test gets its own database on it.
PG_SERVER = os.environ.get("CRAWLER_TEST_PG_SERVER", "postgresql://postgres@localhost:5432")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """URL of a fresh SQLite file database."""
    return f"sqlite:///{tmp_path / 'crawl.db'}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """URL of a fresh, uniquely named PostgreSQL database, dropped after the test."""
    name = f"crawler_test_{uuid.uuid4().hex}"
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            admin.execute(drop.format(sql.Identifier(name)))


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest) -> str:
    """Each test using it runs once on SQLite and once on PostgreSQL."""
    fixture = "sqlite_url" if request.param == "sqlite" else "pg_url"
    url: str = request.getfixturevalue(fixture)
    return url


@pytest.fixture
def amqp_url() -> Iterator[str]:
    """AMQP URL of a fresh RabbitMQ vhost, deleted after the test."""
    with services.vhost() as url:
        yield url


@pytest.fixture
def rabbitmq_node(tmp_path: Path) -> Iterator[Node]:
    """A private RabbitMQ node of the test's own, halted after: for faults that hit a whole node
    (alarms, restarts), which the shared node must never see."""
    with private_node(tmp_path / "rabbitmq", "crawler-test") as node:
        yield node


@pytest.fixture
def prefix() -> Iterator[str]:
    """A fresh prefix for queue names and Redis keys; its Redis keys are deleted after."""
    with services.key_prefix() as value:
        yield value


@pytest.fixture
async def redis() -> AsyncIterator[Redis]:
    """An async Redis client on the test server."""
    client = Redis.from_url(services.REDIS_URL)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def channel(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    """A channel with publisher confirms on the test's own vhost."""
    async with await aio_pika.connect(amqp_url) as connection:
        yield await connection.channel(publisher_confirms=True)


@pytest.fixture
async def fetchers() -> AsyncIterator[list[BoundedFetcher]]:
    """The fetchers a test made, closed after it."""
    made: list[BoundedFetcher] = []
    yield made
    for fetcher in made:
        await fetcher.aclose()
