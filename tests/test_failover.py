"""Several RabbitMQ nodes in CRAWLER_AMQP_URL, and Redis through Sentinel: parsing, checking, and a
connection that turns to another node when it loses its own (the cluster tests kill real nodes)."""

from __future__ import annotations

import logging

import pytest

from crawler import connections, sentinel
from crawler.errors import ConfigError, ServiceUnavailable
from crawler.failover import BACKOFF_FIRST, BACKOFF_MOST, FailoverConnection, backoff, first_node, nodes
from crawler.settings import Settings
from demo.site import free_port
from tests.support import services
from tests.support.wait import until


def test_a_node_list_is_split_on_commas_and_the_first_names_the_management_api() -> None:
    url = " amqp://u:p@a:5672/v , amqp://u:p@b:5673/v,"
    assert nodes(url) == ["amqp://u:p@a:5672/v", "amqp://u:p@b:5673/v"]
    assert first_node(url) == "amqp://u:p@a:5672/v"
    assert nodes("amqp://h/") == ["amqp://h/"]


def test_the_backoff_doubles_to_its_ceiling_and_draws_from_the_upper_half() -> None:
    assert backoff(0, 0.0) == BACKOFF_FIRST / 2 and backoff(0, 0.999) < BACKOFF_FIRST
    assert backoff(3, 0.0) == BACKOFF_FIRST * 8 / 2
    assert backoff(50, 0.0) == BACKOFF_MOST / 2 and backoff(50, 0.999) < BACKOFF_MOST


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("amqp://a:5672/v,amqp://b:5672/w", "same /VHOST"),
        ("amqp://a:5672/v,http://b/", "not a RabbitMQ URL"),
        ("redis+sentinel://s1:26379,s2:x/crawler/0", "'s2:x' is not a sentinel's HOST:PORT"),
        ("redis+sentinel://s1:26379", "name the master's service"),
    ],
)
def test_a_wrong_node_list_or_sentinel_url_is_refused_with_its_shape(value: str, problem: str) -> None:
    key = "CRAWLER_REDIS_URL" if value.startswith("redis") else "CRAWLER_AMQP_URL"
    with pytest.raises(ConfigError, match=problem):
        Settings.from_env({key: value})


def test_a_sentinel_url_names_the_sentinels_the_service_the_database_and_the_password() -> None:
    url = sentinel.parse("redis+sentinel://:s%40cret@10.0.0.1:26380,[::1],sentinel-2:26379/my-master/3")
    assert url.sentinels == (("10.0.0.1", 26380), ("::1", 26379), ("sentinel-2", 26379))
    assert (url.service, url.db, url.username, url.password) == ("my-master", 3, None, "s@cret")
    assert Settings.from_env({"CRAWLER_REDIS_URL": "redis+sentinel://h/crawler"}).redis_url


async def test_a_fleet_connects_to_a_node_that_answers_and_says_which_did_not(
    amqp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"amqp://guest:guest@127.0.0.1:{free_port('127.0.0.1')}/{amqp_url.rsplit('/', 1)[1]}"
    caplog.set_level(logging.WARNING, logger="crawler.connections")
    for _ in range(4):  # it starts at a random node: whichever, it ends on the live one
        async with connections.broker(f"{dead},{amqp_url}", "probe") as connection:
            assert str(connection.url).startswith(amqp_url.split("/", 3)[0] + "//guest:guest@localhost")
    with pytest.raises(ServiceUnavailable, match=r"at amqp://guest:\*\*\*@127.0.0.1:\d+/.*refused"):
        async with connections.broker(f"{dead},{dead}", "probe"):
            pass


async def test_a_connection_that_loses_its_node_tries_the_next_and_comes_back(
    amqp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port("127.0.0.1")
    dead = f"amqp://guest:guest@127.0.0.1:{port}/{amqp_url.rsplit('/', 1)[1]}"
    caplog.set_level(logging.WARNING, logger="crawler.connections")
    caplog.set_level(logging.WARNING, logger="aio_pika.robust_connection")
    async with connections.broker(f"{amqp_url},{dead}", "probe") as connection:
        assert isinstance(connection, FailoverConnection)
        live = str(connection.url)
        channel = await connection.channel()
        queue = await channel.declare_queue("kept", auto_delete=False)
        await services.close_connection(amqp_url)
        # The next node refuses; the one after (the live one again) takes it, channels restored.
        await until(lambda: "RabbitMQ connection (probe) back" in caplog.text, within=30, what="back")
        assert str(connection.url) == live
        # The attempt in between went to the other node (aio-pika logs a failed reconnect attempt).
        tried = [r.getMessage() for r in caplog.records if r.name == "aio_pika.robust_connection"]
        assert any(f"127.0.0.1:{port}" in line or f"{port})" in line for line in tried), tried
        assert (await queue.channel.declare_queue("kept", passive=True)).name == "kept"
