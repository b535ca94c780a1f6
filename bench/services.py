"""Clean state for each run: a fresh RabbitMQ vhost and Redis key prefix, removed afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import quote

import httpx
import psycopg
import redis
from psycopg import sql

AMQP_HOST = os.environ.get("BENCH_AMQP_HOST", "localhost")
MANAGEMENT = f"http://{AMQP_HOST}:15672"
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://localhost:6379/0")
PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgresql://postgres@localhost:5432")
AUTH = ("guest", "guest")


def unique(kind: str) -> str:
    """A name no other run uses."""
    return f"{kind}{uuid.uuid4().hex[:10]}"


@contextmanager
def vhost() -> Iterator[str]:
    """A fresh RabbitMQ vhost (guest may use it); yields its AMQP URL, deletes it after."""
    name = unique("crawler-bench-")
    with httpx.Client(base_url=MANAGEMENT, auth=AUTH, timeout=60, trust_env=False) as api:
        api.put(f"/api/vhosts/{name}").raise_for_status()
        api.put(
            f"/api/permissions/{name}/guest", json={"configure": ".*", "write": ".*", "read": ".*"}
        ).raise_for_status()
        try:
            yield f"amqp://guest:guest@{AMQP_HOST}:5672/{quote(name, safe='')}"
        finally:
            api.delete(f"/api/vhosts/{name}")


def delete_keys(prefix: str) -> None:
    """Delete every Redis key under `prefix:`."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 1000):
            client.delete(*keys[i : i + 1000])
    finally:
        client.close()


@contextmanager
def key_prefix(kind: str) -> Iterator[str]:
    """A fresh Redis key prefix; its keys are deleted after."""
    prefix = unique(kind)
    try:
        yield prefix
    finally:
        delete_keys(prefix)


@contextmanager
def database() -> Iterator[str]:
    """A fresh PostgreSQL database; yields its URL, drops it after."""
    name = unique("crawler_bench_")
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{PG_SERVER}/{name}"
    finally:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
