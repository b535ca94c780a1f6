"""Webhooks against the real services and a receiver of the tests' own: every version of a crawl
POSTed, signed as docs/outputs.md says (its snippet verifies them), a hanging receiver not holding the
crawl; a failing one retried through the retry tiers, dead-lettered, and replayed by `crawler dead`;
the private-network guard; the configuration's checks."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler import connections
from crawler.config import CrawlConfig, load_config, parse_config
from crawler.errors import ConfigError
from crawler.frontier.dead import list_dead, matcher
from crawler.frontier.exchanges import declare, topology
from crawler.monitor.metrics import Metrics
from crawler.settings import Settings
from crawler.sink.sql import engine_url
from crawler.sink.tables import PageVersion
from crawler.webhooks import SIGNATURE_HEADER, delivering
from crawler.worker import wiring
from tests.support.fresh import serving
from tests.support.receiver import Received, Receiver, receiving
from tests.support.services import REPO, queue_info, run, settings_for
from tests.support.wait import until
from tests.worker.test_archive import site_of

SECRET = "whsec-0123456789abcdef"


def documented_verify() -> Callable[[str, str, bytes], bool]:
    """The verification snippet of docs/outputs.md, run as a receiver would copy it."""
    text = (REPO / "docs" / "outputs.md").read_text()
    section = text.split("## Verifying a delivery", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code is not None
    space: dict[str, Any] = {}
    exec(compile(code[1], "docs/outputs.md", "exec"), space)
    verify: Callable[[str, str, bytes], bool] = space["verify"]
    return verify


def signed(received: Received, secret: str = SECRET) -> bool:
    return documented_verify()(secret, received.headers[SIGNATURE_HEADER], received.body)


@asynccontextmanager
async def deliveries(settings: Settings, config: CrawlConfig, metrics: Metrics) -> AsyncIterator[None]:
    async with (
        connections.broker(settings.amqp_url, "test webhooks") as connection,
        delivering(lambda: config, settings.names, connection, metrics, "test webhooks"),
    ):
        yield


def metric(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def version_ids(database_url: str) -> set[str]:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            found = conn.execute(sa.select(PageVersion.page_id, PageVersion.version)).all()
            return {f"{page}:{version}" for page, version in found}
    finally:
        engine.dispose()


@pytest.mark.timeout(120)
async def test_every_version_of_a_crawl_is_posted_signed_and_a_hanging_receiver_holds_no_page(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, redis: Redis
) -> None:
    site = site_of(12)
    with receiving(Receiver()) as receiver:
        config_path = tmp_path / "d.yaml"
        config_path.write_text(
            yaml.safe_dump(
                {
                    "defaults": {"retry_delays": [0.2], "rate": 500, "burst": 100, "sitemaps": False},
                    "resolve": {site.host: site.ip},
                    "allow_private_networks": True,
                    "domains": {site.host: {"history": {}, "extract": {"heading": "h1"}}},
                    "webhooks": [{"url": receiver.url("/hook"), "secret": SECRET}],
                }
            )
        )
        settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
        config = load_config(config_path)
        receiver.open.clear()  # it takes every POST and answers none: the crawl goes on regardless
        with serving(site):
            stats = (await wiring.consume(settings, config, burst=True, seeds=[site.url()])).stats
        assert sum(s.ok for s in stats.values()) == 14  # and the 404
        versions = version_ids(sqlite_url)
        assert len(versions) == 14  # every page but the 404
        # Every answer is still held: no delivery was acked, so every version waits in the queue.
        await until(
            lambda: queue_info(amqp_url, settings.names.webhooks).get("messages"),
            lambda n: n == len(versions),
            30,
            "every version in the webhooks queue",
        )
        receiver.open.set()
        metrics = Metrics()
        async with deliveries(settings, config, metrics):
            await until(
                lambda: metric(
                    metrics,
                    "crawler_webhook_deliveries_total",
                    webhook=receiver.url("")[7:],
                    outcome="delivered",
                ),
                lambda n: n == len(versions),
                60,
                "every version delivered",
            )
        posts = receiver.on("/hook")
    # A version whose POST was cut short by the crawl's end came again, with the same key.
    assert {p.headers["Idempotency-Key"] for p in posts} == versions
    for post in posts:
        assert signed(post)
        assert not documented_verify()("another-secret-0000", post.headers[SIGNATURE_HEADER], post.body)
        assert not documented_verify()(SECRET, post.headers[SIGNATURE_HEADER], post.body + b" ")
        body = json.loads(post.body)
        assert body["kind"] == post.headers["Crawler-Event"] == "new" and body["domain"] == site.host
        assert post.headers["Content-Type"] == "application/json"
    assert {json.loads(p.body)["url"] for p in posts} == {
        site.url(),
        *(site.url(f"/p/{i}") for i in range(12)),
        site.url("/file.pdf"),
    }


async def publish_versions(
    amqp_url: str, settings: Settings, config: CrawlConfig, *versions: dict[str, Any]
) -> None:
    """Versions as the change feed publishes them (crawler/changes/feed.py), persistent and confirmed."""
    connection = await aio_pika.connect(amqp_url)
    try:
        channel = await connection.channel(publisher_confirms=True)
        await declare(channel, topology(config, settings.names))
        exchange = await channel.get_exchange(settings.names.changes, ensure=False)
        for i, version in enumerate(versions):
            message = aio_pika.Message(
                json.dumps(version).encode(),
                message_id=f"{100 + i}:{version['version']}",
                type=version["kind"],
                content_type="application/json",
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
            )
            await exchange.publish(message, routing_key=version["domain"])
    finally:
        await connection.close()


def version(url: str, kind: str, number: int = 1) -> dict[str, Any]:
    return {
        "url": url,
        "domain": "shop.test",
        "crawl": None,
        "version": number,
        "fetched_at": "2026-12-06T06:00:00Z",
        "kind": kind,
    }


def hooks_config(path: Path, hooks: list[dict[str, Any]], **top: Any) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "allow_private_networks": True,
                "domains": {"shop.test": {}, "blog.test": {}},
                "webhooks": hooks,
                **top,
            }
        )
    )
    return path


@pytest.mark.timeout(120)
async def test_a_failing_receiver_is_retried_through_the_tiers_then_dead_lettered_and_replayed(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    with receiving(Receiver(answers={"/a": [500]})) as receiver:
        config_path = hooks_config(
            tmp_path / "d.yaml",
            [
                {"url": receiver.url("/a"), "secret": SECRET, "retry_delays": [0.2, 0.4]},
                {
                    "url": receiver.url("/b"),
                    "secret": SECRET + "-b",
                    "kinds": ["changed"],
                    "domains": ["shop.test"],
                },
            ],
        )
        settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
        config = load_config(config_path)
        assert {0.2, 0.4} <= set(config.retry_tiers)  # the receivers' delays have tiers of their own
        new, changed = version("https://shop.test/p/1", "new"), version("https://shop.test/p/2", "changed", 3)
        await publish_versions(amqp_url, settings, config, new, changed)
        metrics = Metrics()
        host = receiver.url("")[7:]
        async with deliveries(settings, config, metrics):
            await until(lambda: len(receiver.on("/a")), lambda n: n == 6, 60, "three tries of each version")
            dead = await until(
                lambda: dead_letters(settings), lambda found: len(found) == 2, 30, "two dead letters"
            )
        tries = receiver.on("/a")
        by_key: dict[str, list[Received]] = {}
        for post in tries:
            by_key.setdefault(post.headers["Idempotency-Key"], []).append(post)
        assert sorted(by_key) == ["100:1", "101:3"]
        for posts in by_key.values():
            assert [p.headers["Crawler-Attempt"] for p in posts] == ["1", "2", "3"]
            assert all(signed(p) for p in posts)
            assert posts[1].at - posts[0].at >= 0.2 and posts[2].at - posts[1].at >= 0.4  # the tiers' delays
        # The other receiver had the one version it wants, once: a retry is for its own receiver.
        assert [p.headers["Idempotency-Key"] for p in receiver.on("/b")] == ["101:3"]
        assert signed(receiver.on("/b")[0], SECRET + "-b")
        assert {(d.url, d.reason, d.domain, d.attempts) for d in dead} == {
            ("https://shop.test/p/1", "webhook", "shop.test", 3),
            ("https://shop.test/p/2", "webhook", "shop.test", 3),
        }
        assert all(d.error == f"webhook {host}: HTTP 500" for d in dead)
        assert metric(metrics, "crawler_webhook_deliveries_total", webhook=host, outcome="retried") == 4
        assert metric(metrics, "crawler_webhook_deliveries_total", webhook=host, outcome="dead") == 2
        # The receiver is mended; the dead letters are replayed as every other one is.
        receiver.answers["/a"] = [200]
        done = run("crawler", ["dead", "replay", "--reason", "webhook"], settings)
        assert done.returncode == 0, done.stderr
        async with deliveries(settings, config, Metrics()):
            await until(
                lambda: len(receiver.on("/a")), lambda n: n == 8, 60, "the replayed versions delivered"
            )
        replayed = receiver.on("/a")[6:]
        assert sorted(p.headers["Idempotency-Key"] for p in replayed) == ["100:1", "101:3"]
        assert [p.headers["Crawler-Attempt"] for p in replayed] == ["1", "1"]
        assert len(receiver.on("/b")) == 1 and await dead_letters(settings) == []


async def dead_letters(settings: Settings) -> list[Any]:
    async with connections.broker(settings.amqp_url, "test dead") as connection:
        return await list_dead(connection, settings.names, matcher(reason="webhook"))


@pytest.mark.timeout(60)
async def test_the_private_network_guard_keeps_webhooks_off_private_addresses(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    with receiving(Receiver()) as receiver:
        url = f"http://hook.test:{receiver.port}/"
        config_path = hooks_config(
            tmp_path / "d.yaml",
            [{"url": url, "secret": SECRET}],
            allow_private_networks=False,
            resolve={"hook.test": receiver.host},
        )
        settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
        config = load_config(config_path)
        await publish_versions(amqp_url, settings, config, version("https://shop.test/", "new"))
        async with deliveries(settings, config, Metrics()):
            dead = await until(
                lambda: dead_letters(settings), lambda found: len(found) == 1, 30, "a dead letter"
            )
        assert receiver.received == []
        assert (
            dead[0].attempts == 1 and "refused: hook.test resolves to 127.0.0.41 (loopback)" in dead[0].error
        )


@pytest.mark.timeout(60)
async def test_a_receiver_that_refuses_is_a_dead_letter_at_once_and_a_429_is_tried_again(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    with receiving(Receiver(answers={"/gone": [410], "/busy": [429, 200]})) as receiver:
        config_path = hooks_config(
            tmp_path / "d.yaml",
            [
                {"url": receiver.url("/gone"), "secret": SECRET, "retry_delays": [0.2, 0.2]},
                {"url": receiver.url("/busy"), "secret": SECRET, "retry_delays": [0.2, 0.2]},
            ],
        )
        settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
        config = load_config(config_path)
        await publish_versions(amqp_url, settings, config, version("https://shop.test/p/1", "new"))
        async with deliveries(settings, config, Metrics()):
            dead = await until(
                lambda: dead_letters(settings), lambda found: len(found) == 1, 30, "a dead letter"
            )
            await until(lambda: len(receiver.on("/busy")), lambda n: n == 2, 30, "the 429 tried again")
        assert len(receiver.on("/gone")) == 1  # a 410 is no reason to try again
        assert dead[0].attempts == 1 and dead[0].error.endswith("HTTP 410")
        assert [p.headers["Crawler-Attempt"] for p in receiver.on("/busy")] == ["1", "2"]


@pytest.mark.parametrize(
    ("hooks", "top", "error"),
    [
        ([{"url": "http://127.0.0.41:8080/", "secret": SECRET}], {}, "127.0.0.41 is not a public address"),
        ([{"url": "ftp://x.example/", "secret": SECRET}], {}, "not an absolute http(s) URL"),
        ([{"url": "https://x.example/", "secret": "short"}], {}, "at least 16 characters"),
        ([{"url": "https://u:p@x.example/", "secret": SECRET}], {}, "no credentials"),
        ([{"url": "https://x.example/", "secret": SECRET, "domains": ["other.test"]}], {}, "other.test"),
        ([{"url": "https://x.example/", "secret": SECRET, "kinds": ["deleted"]}], {}, "kinds"),
        ([{"url": "https://x.example/", "secret": SECRET}] * 2, {}, "listed twice"),
    ],
)
def test_the_webhooks_are_checked_with_domains_yaml(
    hooks: list[dict[str, Any]], top: dict[str, Any], error: str
) -> None:
    text = yaml.safe_dump({"domains": {"shop.test": {}}, "webhooks": hooks, **top})
    with pytest.raises(ConfigError, match=re.escape(error)):
        parse_config(text)


def test_a_webhooks_secret_stays_out_of_reprs() -> None:
    config = parse_config(yaml.safe_dump({"webhooks": [{"url": "https://x.example/h", "secret": SECRET}]}))
    assert SECRET not in repr(config) and config.webhooks[0].host == "x.example"
    allowed = parse_config(
        yaml.safe_dump(
            {
                "allow_networks": ["127.0.0.41"],
                "webhooks": [{"url": "http://127.0.0.41:9/", "secret": SECRET}],
            }
        )
    )
    assert allowed.webhooks[0].url == "http://127.0.0.41:9/"
