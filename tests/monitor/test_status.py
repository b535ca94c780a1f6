"""`crawler status`: queue depths (management API or passive declares), stored pages, live workers."""

from __future__ import annotations

import asyncio
import io
import json
import signal
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from rich.console import Console

from crawler import connections
from crawler.cli import main
from crawler.config import load_config
from crawler.frontier.crawls import CrawlState
from crawler.monitor.status import management_url, render, rich_tables, status, watch
from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import PageRecord, Sink, migrate
from demo.site import serve
from tests.support.crawls import consumer, finish, seed
from tests.support.services import run, settings_for
from tests.support.sites import reachable, shops, write_config
from tests.support.wait import until


def ready(data: dict[str, Any]) -> dict[str, int]:
    return {d["domain"]: d["queue"]["ready"] for d in data["domains"]}


@pytest.mark.parametrize(
    ("amqp", "api", "expected"),
    [
        ("amqp://u:p@rabbit:5672/crawl", None, ("http://rabbit:15672", "crawl", ("u", "p"))),
        ("amqp://rabbit/", None, ("http://rabbit:15672", "/", ("guest", "guest"))),
        ("amqp://u:p@rabbit/%2F", None, ("http://rabbit:15672", "/", ("u", "p"))),
        (
            "amqp://u:p@rabbit/v",
            "https://mgmt.example/rabbitmq/",
            ("https://mgmt.example/rabbitmq", "v", ("u", "p")),
        ),
        (
            "amqp://u:p@rabbit/v",
            "http://admin:s%40cret@[::1]:8080",
            ("http://[::1]:8080", "v", ("admin", "s@cret")),
        ),
    ],
)
def test_management_url(amqp: str, api: str | None, expected: tuple[str, str, tuple[str, str]]) -> None:
    assert management_url(amqp, api) == expected


async def test_queue_depths_with_the_management_api_and_without_it(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=3)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    config = load_config(settings.config_path)
    await asyncio.to_thread(migrate, sqlite_url)  # a status read creates no schema
    a, b = sites[0], sites[1]
    await seed(settings, a.url(), a.url("/product/1"), a.url("/product/2"), b.url())
    names = Names(prefix)
    expected = {"a.test": 3, "b.test": 1, "c.test": 0}
    # The management API's numbers lag a few seconds behind the broker's.
    data = await until(lambda: status(settings, config), lambda d: ready(d) == expected, within=30)
    assert data["depths_from"] == "management"
    assert all(d["queue"]["unacked"] == 0 and d["queue"]["consumers"] == 0 for d in data["domains"])
    shared = {names.dead, names.unrouted, *(names.retry_queue(t) for t in config.retry_tiers)}
    assert {q["name"] for q in data["queues"]} == shared
    assert all(q["ready"] == 0 for q in data["queues"])

    # Two messages delivered and not acked yet.
    async with await aio_pika.connect(amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.get_queue(names.domain_queue("a.test"))
        held = [await queue.get(no_ack=False) for _ in range(2)]
        data = await until(
            lambda: status(settings, config),
            lambda d: d["domains"][0]["queue"]["unacked"] == 2 and ready(d)["a.test"] == 1,
            within=30,
        )
        # Without the API: passive declares, exact at once, but blind to unacked messages.
        away = replace(settings, management_url="http://127.0.0.1:9")
        data = await status(away, config)
        assert data["depths_from"] == "passive"
        assert ready(data) == {"a.test": 1, "b.test": 1, "c.test": 0}
        assert all(d["queue"]["unacked"] is None for d in data["domains"])
        assert {q["name"] for q in data["queues"]} == shared
        assert "unacked unknown" in render(data)
        for message in held:
            await message.nack(requeue=True)


async def test_pages_stored_and_pages_per_second(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    await asyncio.to_thread(migrate, sqlite_url)
    sink_db = Database(sqlite_url)
    sink = Sink(sink_db)
    long_ago = datetime.now(UTC) - timedelta(hours=2)
    try:
        await sink.store_many(
            [
                PageRecord("http://a.test/1", "a.test", 0, 1),
                PageRecord("http://a.test/2", "a.test", 0, 1),
                PageRecord("http://a.test/3", "a.test", 0, 1, error="HTTP 404", status_code=404),
                PageRecord("http://a.test/4", "a.test", 0, 1, fetched_at=long_ago),
                PageRecord("http://b.test/1", "b.test", 0, 1, fetched_at=long_ago),
            ]
        )
    finally:
        sink_db.close()
    # A skipped page has no row: its crawl's counts say it, an ended crawl's record, a running one's Redis.
    crawls_db = Database(sqlite_url)
    crawls = CrawlStore(crawls_db)
    try:
        for crawl in ("ended", "running"):
            crawls.add(CrawlRecord(crawl, None, "running", [], {}, datetime.now(UTC), None, None))
        crawls.end("ended", "finished", {"a.test": {"ok": 1, "skipped": 2}})
    finally:
        crawls_db.close()
    async with connections.redis(settings.redis_url) as redis:
        await CrawlState(redis, settings.names).count(
            "running", {("a.test", "routed"): 3, ("a.test", "skipped"): 1}
        )
    data = await status(settings, load_config(settings.config_path))
    by_domain = {d["domain"]: d for d in data["domains"]}
    assert (by_domain["a.test"]["pages_ok"], by_domain["a.test"]["pages_failed"]) == (3, 1)
    assert (by_domain["a.test"]["pages_skipped"], by_domain["b.test"]["pages_skipped"]) == (3, 0)
    assert by_domain["a.test"]["pages_per_second"] == round(3 / 60, 2)  # three in the last minute
    assert by_domain["b.test"]["pages_per_second"] == 0
    assert data["pages_per_second"] == round(3 / 60, 2)
    assert data["workers"] == []


def status_json(settings: Settings) -> dict[str, Any]:
    """What `crawler status --json` prints."""
    result = run("crawler", ["status", "--json"], settings, timeout=60)
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def states(data: dict[str, Any]) -> dict[int, str]:
    return {w["pid"]: w["state"] for w in data["workers"]}


async def test_status_json_lists_live_workers_and_a_killed_one_as_gone(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=4, hosts=["a.test", "b.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    pages = len(reachable(sites))
    await asyncio.to_thread(migrate, sqlite_url)  # a status read before a consumer's start finds it
    with serve(*sites):
        await seed(settings, *(s.url() for s in sites))
        victim = consumer(settings, "--heartbeat-ttl", "2", "--domains", "a.test")
        survivor = consumer(settings, "--heartbeat-ttl", "2")
        try:
            # Both live, each with its domains; together they did every page; two consumers on a.test.
            data = await until(
                lambda: asyncio.to_thread(status_json, settings),
                lambda d: (
                    states(d) == {victim.pid: "live", survivor.pid: "live"}
                    and sum(w["pages"] for w in d["workers"]) == pages
                    and d["domains"][0]["queue"]["consumers"] == 2
                ),
                within=90,
                what="two live workers that did every page",
            )
            by_pid = {w["pid"]: w for w in data["workers"]}
            assert by_pid[victim.pid]["domains"] == ["a.test"]
            assert by_pid[survivor.pid]["domains"] == ["a.test", "b.test"]
            assert {w["role"] for w in data["workers"]} == {"crawler-consume"}
            assert all(w["host"] and w["started"] and w["ttl"] == 2 for w in data["workers"])
            assert sum(d["pages_ok"] + d["pages_failed"] for d in data["domains"]) == pages

            victim.send_signal(signal.SIGKILL)
            await asyncio.to_thread(victim.communicate, timeout=30)
            # Within its TTL (2 s) of its last beat, the killed worker shows as gone.
            data = await until(
                lambda: asyncio.to_thread(status_json, settings),
                lambda d: states(d) == {victim.pid: "gone", survivor.pid: "live"},
                within=30,
                what="the killed worker to show as gone",
            )
            assert "gone" in render(data)
        finally:
            survivor.send_signal(signal.SIGTERM)
            await asyncio.to_thread(finish, survivor)
            if victim.poll() is None:
                victim.kill()
    # A worker that stopped cleanly is not listed; the killed one still is.
    assert states(await asyncio.to_thread(status_json, settings)) == {victim.pid: "gone"}


SAMPLE: dict[str, Any] = {
    "depths_from": "management",
    "domains": [
        {
            "domain": "a.test",
            "queue": {"name": "crawler.domain.a.test", "ready": 12, "unacked": 3, "consumers": 2},
            "pages_ok": 40,
            "pages_failed": 1,
            "pages_skipped": 6,
            "pages_per_second": 2.5,
        }
    ],
    "queues": [{"name": "crawler.dead", "ready": 4, "unacked": 0, "consumers": 0}],
    "pages_per_second": 2.5,
    "workers": [
        {
            "state": state,
            "age": None if state == "gone" else 1.5,
            "id": f"h{i}:1{i}:abc",
            "host": f"h{i}",
            "pid": 10 + i,
            "role": "crawler-consume",
            "domains": ["a.test"],
            "pages": 7,
            "started": "2024-01-01T00:00:00+00:00",
            "beat": 1_700_000_000.0,
            "ttl": 30.0,
        }
        for i, state in enumerate(["live", "late", "gone"])
    ],
}


def test_render_shows_queues_rates_and_workers() -> None:
    text = render(SAMPLE)
    assert "a.test" in text and "12" in text and "2.50" in text and "crawler.dead" in text
    assert "workers: 1 live, 1 late, 1 gone" in text
    for host, state in (("h0", "live"), ("h1", "late"), ("h2", "gone")):
        line = next(line for line in text.splitlines() if line.startswith(host))
        assert state in line
    assert "unacked unknown" not in text
    assert "archive uploads" not in text  # no worker uploads: no column
    # Subscriptions are labelled as such; live workers holding none say why a queue shows 0.
    assert text.splitlines()[0].split()[3] == "subscribed" and "subscribed to no" not in text
    assert text.splitlines()[0].split()[4:7] == ["ok", "failed", "skipped"]
    assert text.splitlines()[1].split()[4:7] == ["40", "1", "6"]
    idle = {
        **SAMPLE,
        "domains": [{**SAMPLE["domains"][0], "queue": {**SAMPLE["domains"][0]["queue"], "consumers": 0}}],
    }
    assert "workers: 1 live, 1 late, 1 gone (subscribed to no domain queue: paused" in render(idle)


def test_render_shows_a_workers_archive_uploads_waiting_and_failing() -> None:
    workers = [dict(w) for w in SAMPLE["workers"]]
    workers[0] |= {"archive_waiting": 2, "archive_error": "uploading to s3://b/x: NoSuchBucket: gone"}
    text = render({**SAMPLE, "workers": workers})
    line = next(line for line in text.splitlines() if line.startswith("h0"))
    assert "2 file(s) waiting; last failed: uploading to s3://b/x: NoSuchBucket: gone" in line
    assert "none waiting" in next(line for line in text.splitlines() if line.startswith("h1"))


async def test_credits_per_domain_show_only_when_some_domain_spent(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    config = load_config(settings.config_path)
    await asyncio.to_thread(migrate, sqlite_url)
    sink_db = Database(sqlite_url)
    sink = Sink(sink_db)
    try:
        await sink.store_many([PageRecord("http://b.test/1", "b.test", 0, 1)])
        free = await status(settings, config)
        assert "credits" not in render(free).splitlines()[0]  # a direct crawl's table is as it was
        await sink.store_many(
            [
                PageRecord("http://a.test/1", "a.test", 0, 1, credits=1.0),
                PageRecord("http://a.test/2", "a.test", 0, 1, credits=5.5),
            ]
        )
    finally:
        sink_db.close()
    data = await status(settings, config)
    by_domain = {d["domain"]: d for d in data["domains"]}
    assert (by_domain["a.test"]["credits"], by_domain["b.test"]["credits"]) == (6.5, 0)
    head, *lines = render(data).splitlines()
    assert head.split()[-1] == "credits"
    assert next(line for line in lines if line.startswith("a.test")).split()[-1] == "6.5"
    assert next(line for line in lines if line.startswith("b.test")).split()[-1] == "0"


async def test_a_schedule_shows_what_is_due_and_what_the_last_fetches_found(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    config = load_config(settings.config_path)
    await asyncio.to_thread(migrate, sqlite_url)
    sink_db = Database(sqlite_url)
    sink = Sink(sink_db)
    now = datetime.now(UTC)
    try:
        plain = [PageRecord("http://b.test/1", "b.test", 0, 1)]
        await sink.store_many(plain)
        assert "due" not in render(await status(settings, config)).splitlines()[0]  # no schedule: as ever
        found = ["changed", "not_modified", "same_signature", "gone", "not_modified"]
        await sink.store_many(
            [
                PageRecord(
                    f"http://a.test/{i}", "a.test", 0, 1, found=f, next_fetch_at=now - timedelta(minutes=i)
                )
                for i, f in enumerate(found)
            ]
        )
    finally:
        sink_db.close()
    data = await status(settings, config)
    freshness = {d["domain"]: d["freshness"] for d in data["domains"]}
    assert freshness["a.test"]["due"] == 5 and freshness["a.test"]["overdue_seconds"] >= 4 * 60
    assert freshness["a.test"]["found"] == {"changed": 1, "not_modified": 2, "same_signature": 1, "gone": 1}
    head, *lines = render(data).splitlines()
    assert head.split()[-5:] == ["due", "overdue", "changed", "unchanged", "gone"]
    a = next(line for line in lines if line.startswith("a.test")).split()
    assert a[-5] == "5" and a[-3:] == ["1", "3", "1"]
    b = next(line for line in lines if line.startswith("b.test")).split()
    assert b[-5:] == ["0", "-", "0", "0", "0"]


def test_rich_tables_render() -> None:
    console = Console(file=io.StringIO(), width=160, force_terminal=True)
    console.print(rich_tables(SAMPLE))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "a.test" in out and "h2 pid 12" in out and "gone" in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [False, True])
async def test_watch_refreshes_until_interrupted(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, terminal: bool
) -> None:
    sites = shops(products=1)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    await asyncio.to_thread(migrate, sqlite_url)
    out = _Terminal() if terminal else io.StringIO()
    console = Console(file=out, width=160, force_terminal=terminal)
    task = asyncio.create_task(watch(settings, load_config(settings.config_path), 0.05, console))

    async def text() -> str:
        return out.getvalue()

    try:
        await until(text, lambda t: t.count("pages/s;") >= 2, within=30, what="two refreshes")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert "c.test" in out.getvalue()


def test_watch_and_json_do_not_go_together(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--watch", "--json"]) == 2
    assert "--watch and --json" in capsys.readouterr().err


def test_status_of_an_unreachable_redis_is_a_clear_error(
    tmp_path: Path, amqp_url: str, sqlite_url: str
) -> None:
    sites = shops(products=1)
    settings = settings_for(amqp_url, "x", sqlite_url, write_config(tmp_path / "d.yaml", sites))
    migrate(sqlite_url)
    result = run("crawler", ["status"], replace(settings, redis_url="redis://127.0.0.1:9/0"), timeout=60)
    assert result.returncode == 2
    assert "cannot connect to Redis at redis://127.0.0.1:9/0: connection refused" in result.stderr
    assert "Traceback" not in result.stderr
