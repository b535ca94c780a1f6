"""Retries through delay tiers, Retry-After, and the dead queue: unit rules, then real crawls."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest

from bench.node import Node
from crawler import names as hdr
from crawler.config import load_config
from crawler.errors import ConnectFailed, Refused, TooLarge
from crawler.frontier.exchanges import topology
from crawler.frontier.retry import JITTER, from_error, from_status, next_delay, parse_retry_after
from crawler.names import Names
from crawler.worker import wiring
from demo.site import Reply, Site, free_port, page, serve
from tests.support.crawls import consumer, dead_letters, finish, rows, run_crawl
from tests.support.services import settings_for
from tests.support.sites import IPS, write_config
from tests.support.wait import until

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("status", [408, 425, 429, 500, 502, 503, 504])
def test_transient_statuses(status: int) -> None:
    failure = from_status(status, None)
    assert failure is not None and failure.transient


@pytest.mark.parametrize("status", [400, 401, 403, 404, 410, 451, 501])
def test_permanent_statuses(status: int) -> None:
    failure = from_status(status, None)
    assert failure is not None and failure.reason == "permanent"


def test_success_is_no_failure() -> None:
    assert from_status(200, None) is None
    assert from_status(304, None) is None


def test_fetch_errors_carry_their_class() -> None:
    assert from_error(ConnectFailed("reset")).transient
    assert not from_error(TooLarge("big")).transient
    assert not from_error(Refused("private")).transient


def test_retry_after_in_seconds_or_as_a_date() -> None:
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(format_datetime(NOW + timedelta(seconds=90), usegmt=True), NOW) == 90.0
    assert parse_retry_after(format_datetime(NOW - timedelta(seconds=90), usegmt=True), NOW) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_delays_grow_and_run_out() -> None:
    delays, tiers = (1.0, 5.0, 30.0), (1.0, 5.0, 30.0, 300.0)
    for attempt, wanted in enumerate(delays, start=1):
        delay = next_delay(delays, attempt, tiers)
        assert delay is not None
        assert delay.tier == wanted
        assert wanted <= delay.seconds <= wanted * JITTER  # jitter only ever later
    assert next_delay(delays, 4, tiers) is None


def test_retry_after_is_honoured_and_capped() -> None:
    delays, tiers = (1.0, 5.0), (1.0, 5.0, 60.0)
    delay = next_delay(delays, 1, tiers, retry_after=20, max_retry_after=60)
    assert delay is not None and delay.tier == 60.0 and 20 <= delay.seconds <= 25
    capped = next_delay(delays, 1, tiers, retry_after=10_000, max_retry_after=60)
    assert capped is not None and 60 <= capped.seconds <= 60 * JITTER


# -- real crawls --------------------------------------------------------------------------------


def flaky_site() -> Site:
    port = free_port(IPS["a.test"])
    routes = {
        "/": page("home", ["/flaky", "/limited", "/broken", "/gone"]),
        "/flaky": lambda n: Reply(503) if n < 2 else page("flaky", []),
        "/limited": lambda n: Reply(429, headers={"Retry-After": "2"}) if n < 1 else page("limited", []),
        "/broken": Reply(500),
        "/gone": Reply(404),
    }
    return Site("a.test", IPS["a.test"], port, routes)  # type: ignore[arg-type]


async def test_failures_are_retried_after_their_delays_then_dead_lettered(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = flaky_site()
    config = write_config(tmp_path / "d.yaml", [site], retry_delays=[0.3, 0.6])
    settings = settings_for(amqp_url, prefix, sqlite_url, config)
    with serve(site):
        await run_crawl(settings, site.url())
    stored = rows(sqlite_url)

    # 503 twice then 200: stored as a success on the third try, each wait at least its delay.
    assert stored[site.url("/flaky")] == (200, None, 3)
    times = [t for t, p in site.requests if p == "/flaky"]
    assert len(times) == 3
    assert times[1] - times[0] >= 0.3
    assert times[2] - times[1] >= 0.6

    # 429 with Retry-After: 2: the next request no sooner than 2 s later.
    limited = [t for t, p in site.requests if p == "/limited"]
    assert len(limited) == 2 and limited[1] - limited[0] >= 2.0
    assert stored[site.url("/limited")] == (200, None, 2)

    # Always 500: exactly 1 + len(retry_delays) requests, then the dead queue with its reasons.
    assert site.hits("/broken") == 3
    assert stored[site.url("/broken")] == (500, "HTTP 500", 3)
    letters = await dead_letters(settings)
    assert len(letters) == 1
    headers = letters[0].headers
    assert headers[hdr.HEADER_REASON] == "transient"
    assert headers[hdr.HEADER_STATUS] == 500
    assert headers[hdr.HEADER_ATTEMPTS] == 3
    assert headers[hdr.HEADER_DOMAIN] == "a.test"
    assert headers[hdr.HEADER_ERROR] == "HTTP 500"
    assert headers[hdr.HEADER_CONSUMER] and headers[hdr.HEADER_TIME]

    # 404: fetched once, recorded, not retried, not dead-lettered.
    assert site.hits("/gone") == 1
    assert stored[site.url("/gone")] == (404, "HTTP 404", 1)


async def test_retries_wait_in_tier_queues_named_for_a_person(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = flaky_site()
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site]))
    names = Names(prefix)
    topology_queues = {q.name for q in topology(load_config(settings.config_path), names).queues}
    assert {names.retry_queue(0.2), names.retry_queue(0.4), names.retry_queue(5)} <= topology_queues
    assert names.retry_queue(0.2) == f"{prefix}.retry.0.2s"
    assert names.retry_queue(300) == f"{prefix}.retry.5m"


async def test_a_database_outage_loses_nothing(
    tmp_path: Path, amqp_url: str, prefix: str, pg_url: str
) -> None:
    import psycopg

    from tests.support.sites import after_requests, reachable, shops, slow

    sites = shops(products=30, hosts=["a.test"])
    slow(sites[0], 0.02)
    database = pg_url.rsplit("/", 1)[1]
    role = f"r{prefix}"
    admin_url = pg_url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'ALTER DATABASE "{database}" OWNER TO "{role}"')
        admin.execute(f'GRANT ALL ON SCHEMA public TO "{role}"')
    role_url = pg_url.replace("postgres@", f"{role}@")
    config = write_config(tmp_path / "d.yaml", sites, retry_delays=[0.2, 0.4])
    settings = settings_for(amqp_url, prefix, role_url, config)
    try:
        with serve(*sites):
            task = asyncio.create_task(run_crawl(settings, sites[0].url()))
            assert await asyncio.to_thread(after_requests(sites, 5).wait, 60)
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'ALTER ROLE "{role}" NOLOGIN')
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
                )
                # The crawl goes on fetching while nothing can be stored...
                assert await asyncio.to_thread(after_requests(sites, 15).wait, 60)
                assert not task.done()
                admin.execute(f'ALTER ROLE "{role}" LOGIN')
            await asyncio.wait_for(task, 90)
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'ALTER ROLE "{role}" LOGIN')
    assert sorted(rows(pg_url)) == sorted(reachable(sites))


async def test_delayed_retries_survive_a_broker_restart_and_consumers_come_back(
    tmp_path: Path, rabbitmq_node: Node, prefix: str, sqlite_url: str
) -> None:
    import signal
    import time

    from tests.support.services import queue_depth

    # A node of the test's own: a restart of the shared one would hit everyone else's tests.
    amqp_url = rabbitmq_node.amqp_url

    port = free_port(IPS["a.test"])
    routes = {"/": page("home", ["/flaky"]), "/flaky": lambda n: Reply(503) if n < 1 else page("ok", [])}
    site = Site("a.test", IPS["a.test"], port, routes)  # type: ignore[arg-type]
    settings = settings_for(
        amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site], retry_delays=[4])
    )
    tier = Names(prefix).retry_queue(4)
    with serve(site):
        worker = consumer(settings)
        await wiring.seed(settings, load_config(settings.config_path), [site.url()])

        async def parked() -> bool:  # the failed try is parked in its delay tier (or the worker died)
            return worker.poll() is not None or await queue_depth(amqp_url, tier) > 0

        await until(parked, within=60, every=0.05)
        assert worker.poll() is None
        await asyncio.to_thread(rabbitmq_node.restart_app)
        # The worker reconnects by itself and takes the retry once its delay has passed.
        deadline = time.monotonic() + 90
        await until(lambda: site.hits("/flaky") >= 2 or worker.poll() is not None, within=90, every=0.05)
        assert worker.poll() is None
        await until(
            lambda: rows(sqlite_url).get(site.url("/flaky"), (None,))[0] == 200,
            within=deadline - time.monotonic(),
            every=0.05,
        )
        worker.send_signal(signal.SIGTERM)
        await asyncio.to_thread(finish, worker)
    assert rows(sqlite_url)[site.url("/flaky")] == (200, None, 2)
