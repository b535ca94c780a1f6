"""The whole path: 3 consumers fetch through 2 gateway replicas and 3 loopback exits, shown from
the site's own log; credits agree everywhere they are counted. And a bad key loses nothing."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import yaml
from redis.asyncio import Redis

from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.sql import engine_url, migrate
from tests.support.crawls import dead_letters, finish, rows, seed
from tests.support.exits import BanningSite, ForwardProxy, write_proxies
from tests.support.lag import LoopLag
from tests.support.services import REDIS_URL, crawler_command, env_for, queue_depth
from tests.support.wait import until

KEY = "fleet-key-0123456789"
METRICS_TOKEN = "fleet-metrics-0123456789"  # /metrics shows the per-key series only to it
MIN_INTERVAL = 0.25
COOLDOWN = 1.0


@pytest.fixture
async def proxies() -> AsyncIterator[list[ForwardProxy]]:
    made = [
        await ForwardProxy("127.0.0.41", src).start() for src in ("127.0.0.42", "127.0.0.43", "127.0.0.44")
    ]
    yield made
    for p in made:
        await p.close()


def gateway(settings: Settings, proxies_path: Path, port: int) -> subprocess.Popen[str]:
    env = env_for(settings) | {"GW_TEST_KEY": KEY, "GW_METRICS_TOKEN": METRICS_TOKEN}
    return subprocess.Popen(
        crawler_command("crawler-gateway", "--listen", f"127.0.0.48:{port}", "--proxies", str(proxies_path)),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def consumer(settings: Settings, endpoint: str, key: str) -> subprocess.Popen[str]:
    env = env_for(settings) | {"CRAWLER_FETCH_API_URL": endpoint, "CRAWLER_FETCH_API_KEY": key}
    return subprocess.Popen(
        crawler_command("crawler-consume", "--burst"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def write_domains(path: Path, site: BanningSite, **top: object) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {
                    "retry_delays": [0.5, 1, 2, 4, 8],
                    "timeout": 5,
                    "rate": 50,
                    "burst": 10,
                    "obey_robots": False,
                    "fetch": "api",
                    "sitemaps": False,  # the requests the site sees are counted
                },
                "resolve": {"a.test": site.ip},
                "allow_private_networks": True,
                "max_retry_after": 5,
                "domains": {"a.test": {}},
                **top,
            }
        )
    )
    return path


def credits_of_rows(database_url: str) -> tuple[int, float, set[str | None]]:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            n, total = conn.execute(
                sa.text("SELECT count(*), sum(credits) FROM pages WHERE error IS NULL")
            ).one()
            exits = {r[0] for r in conn.execute(sa.text("SELECT DISTINCT exit_id FROM pages"))}
            return n, float(total or 0), exits
    finally:
        engine.dispose()


@pytest.mark.timeout(240)
async def test_three_consumers_two_replicas_three_exits(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, redis: Redis, proxies: list[ForwardProxy]
) -> None:
    from demo.site import free_port

    site = await BanningSite("127.0.0.21", pages=40, limit=4, ban_for=0.5, ban_at=6).start()
    settings = Settings(
        amqp_url, REDIS_URL, database_url, str(write_domains(tmp_path / "d.yaml", site)), prefix
    )
    path = write_proxies(
        tmp_path / "p.yaml",
        proxies,
        min_interval=MIN_INTERVAL,
        max_wait=4,
        cooldown={"base": COOLDOWN, "max": 4, "jitter": 0.1},
        metrics_token_env="GW_METRICS_TOKEN",
    )
    ports = [free_port("127.0.0.48"), free_port("127.0.0.48")]
    gateways = [gateway(settings, path, port) for port in ports]
    consumers: list[subprocess.Popen[str]] = []
    # The site logs in this loop: how late the loop ran is how blurred the log's times are.
    async with LoopLag() as lag:
        try:
            async with httpx.AsyncClient(trust_env=False) as client:
                for port in ports:
                    await until(lambda p=port: _healthy(client, p), what="gateway up", within=30)
            await seed(settings, site.url("a.test"))
            # Three consumers, each with its own replica (two share one), like a fleet behind a balancer.
            consumers = [consumer(settings, f"http://127.0.0.48:{ports[i % 2]}/fetch", KEY) for i in range(3)]
            await asyncio.to_thread(finish, *consumers, timeout=200)
            operator = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            async with httpx.AsyncClient(trust_env=False, headers=operator) as client:
                metrics = [(await client.get(f"http://127.0.0.48:{p}/metrics")).text for p in ports]
        finally:
            for g in gateways:
                g.terminate()
            for g in gateways:
                g.communicate(timeout=30)
            await site.close()
    pages, row_credits, exits = credits_of_rows(database_url)
    assert pages == 41  # the home page and its 40: every page landed
    assert exits <= {"e0", "e1", "e2"} and len(exits) >= 2
    hits = site.by_client()
    gaps = [b[0] - a[0] for log in hits.values() for a, b in itertools.pairwise(log)]
    # Most gaps hold to the letter; the rest within how late the site's own loop ran.
    assert sum(g >= MIN_INTERVAL - 0.05 for g in gaps) >= 0.9 * len(gaps), (gaps, lag.worst)
    # The spacing is kept where a replica reserves the exit; a request sent late by d (a loaded
    # replica, a new connection) shortens its gap before by d and lengthens the one after by d, so
    # each window of two gaps holds to the letter, and a single gap only to half (two requests given
    # the same slot would show a gap near 0 and a window of one interval).
    slack = 0.05 + lag.worst
    for client_ip, log in hits.items():
        for a, b in itertools.pairwise(log):
            assert b[0] - a[0] >= MIN_INTERVAL / 2, (client_ip, a, b, lag.worst)
            if a[2] == 403:
                assert b[0] - a[0] >= COOLDOWN * 0.9 - slack, (client_ip, a, b)  # cooldown kept
        for a, _, c in zip(log, log[1:], log[2:], strict=False):
            assert c[0] - a[0] >= 2 * MIN_INTERVAL - slack, (client_ip, a, c, lag.worst)  # fleet-wide spacing
    assert any(status == 403 for *_, status in site.log), "no ban happened: the test proves nothing"
    names = Names(prefix)
    ledger = float(await redis.get(names.gw_credits_key("test")) or 0)
    counted = float(await redis.get(names.credits_key("a.test")) or 0)
    exported = sum(
        float(line.rsplit(" ", 1)[1])
        for m in metrics
        for line in m.splitlines()
        if line.startswith("crawler_gateway_credits_total{")
    )
    assert ledger == counted == exported == row_credits == pages  # 1 credit a page: bans were free
    assert await dead_letters(settings) == []


async def _healthy(client: httpx.AsyncClient, port: int) -> bool:
    try:
        return (await client.get(f"http://127.0.0.48:{port}/healthz")).status_code == 200
    except httpx.HTTPError:
        return False


async def test_a_rejected_key_stops_the_domain_and_loses_nothing(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, proxies: list[ForwardProxy]
) -> None:
    from demo.site import free_port

    site = await BanningSite("127.0.0.21", pages=5, limit=100).start()
    settings = Settings(
        amqp_url, REDIS_URL, database_url, str(write_domains(tmp_path / "d.yaml", site)), prefix
    )
    port = free_port("127.0.0.48")
    gw = gateway(settings, write_proxies(tmp_path / "p.yaml", proxies), port)
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            await until(lambda: _healthy(client, port), what="gateway up", within=30)
        await seed(settings, site.url("a.test"))
        worker = consumer(settings, f"http://127.0.0.48:{port}/fetch", "not-the-key")
        queue = Names(prefix).domain_queue("a.test")
        await asyncio.sleep(0)  # (the worker starts on its own; we wait on what it logs)
        _, err = await asyncio.to_thread(_until_line, worker, "stopped until this worker is restarted")
        worker.terminate()
        worker.communicate(timeout=30)
    finally:
        gw.terminate()
        gw.communicate(timeout=30)
        await site.close()
    assert "fetch service answered 401" in err and "CRAWLER_FETCH_API_KEY" in err and "not-the-key" not in err
    assert await until(
        lambda: queue_depth(amqp_url, queue), lambda n: n == 1, what="the seed back in its queue"
    )
    assert await dead_letters(settings) == []
    assert site.log == []


@pytest.mark.timeout(180)
async def test_crawl_with_a_rejected_key_exits_2_saying_why_and_marks_the_crawl_interrupted(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, proxies: list[ForwardProxy]
) -> None:
    from demo.site import free_port

    site = await BanningSite("127.0.0.21", pages=5, limit=100).start()
    settings = Settings(
        amqp_url, REDIS_URL, sqlite_url, str(write_domains(tmp_path / "d.yaml", site)), prefix
    )
    port = free_port("127.0.0.48")
    gw = gateway(settings, write_proxies(tmp_path / "p.yaml", proxies), port)
    env = env_for(settings) | {
        "CRAWLER_FETCH_API_URL": f"http://127.0.0.48:{port}/fetch",
        "CRAWLER_FETCH_API_KEY": "not-the-key",
    }
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            await until(lambda: _healthy(client, port), what="gateway up", within=30)
        crawl = await asyncio.to_thread(
            subprocess.run,
            crawler_command("crawler", "crawl", site.url("a.test")),
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        listed = await asyncio.to_thread(
            subprocess.run,
            crawler_command("crawler", "crawls", "list", "--json"),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        gw.terminate()
        gw.communicate(timeout=30)
        await site.close()
    assert crawl.returncode == 2, crawl.stderr
    errors = [line for line in crawl.stderr.splitlines() if line.startswith("crawler: error:")]
    assert len(errors) == 1, crawl.stderr
    assert "cannot fetch a.test" in errors[0] and "answered 401" in errors[0] and "stay queued" in errors[0]
    assert "not-the-key" not in crawl.stderr + crawl.stdout
    assert await queue_depth(amqp_url, Names(prefix).domain_queue("a.test")) == 1
    [view] = [json.loads(line) for line in listed.stdout.splitlines()]
    assert view["state"] == "interrupted" and view["finished"] is not None, view


def _until_line(process: subprocess.Popen[str], text: str) -> tuple[None, str]:
    assert process.stderr is not None
    seen = []
    for line in process.stderr:
        seen.append(line)
        if text in line:
            return None, "".join(seen)
    raise AssertionError("".join(seen))


def landed(database_url: str) -> tuple[int, int, int]:
    """Rows, distinct URLs and rows with an error, in `pages`."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            rows, urls, failed = conn.execute(
                sa.text("SELECT count(*), count(DISTINCT url), count(error) FROM pages")
            ).one()
            return int(rows), int(urls), int(failed)
    finally:
        engine.dispose()


async def _answers(port: int, code: int) -> float:
    """How many envelope answers of status `code` a gateway gave (its /metrics)."""
    async with httpx.AsyncClient(trust_env=False) as client:
        text = (await client.get(f"http://127.0.0.48:{port}/metrics")).text
    wanted = f'crawler_gateway_answers_total{{code="{code}"}}'
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(wanted))


def _stop(*processes: subprocess.Popen[str]) -> None:
    for p in processes:
        if p.poll() is None:
            p.terminate()
    for p in processes:
        p.communicate(timeout=30)


@pytest.mark.timeout(180)
async def test_a_spent_budget_pauses_the_domain_and_the_crawl_completes_once_it_is_raised(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, redis: Redis, proxies: list[ForwardProxy]
) -> None:
    from demo.site import free_port

    site = await BanningSite("127.0.0.21", pages=30, limit=1000).start()
    pause = 1.5
    domains = write_domains(tmp_path / "d.yaml", site, budget_pause=pause)
    settings = Settings(amqp_url, REDIS_URL, database_url, str(domains), prefix)
    budget = 10
    key = {"id": "test", "key_env": "GW_TEST_KEY"}
    path = write_proxies(tmp_path / "p.yaml", proxies, min_interval=0, keys=[key | {"budget": budget}])
    port = free_port("127.0.0.48")
    gw = gateway(settings, path, port)
    consumers: list[subprocess.Popen[str]] = []
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            await until(lambda: _healthy(client, port), what="gateway up", within=30)
        await seed(settings, site.url("a.test"))
        consumers = [consumer(settings, f"http://127.0.0.48:{port}/fetch", KEY) for _ in range(2)]
        await until(lambda: _answers(port, 402), lambda n: n > 0, what="the budget spent", within=60)
        # Spent: the pages left wait in their queue; none is failed or set aside.
        queue = Names(prefix).domain_queue("a.test")
        assert await until(lambda: queue_depth(amqp_url, queue), lambda n: n > 0, what="pages kept queued")
        rows, _, failed = landed(database_url)
        assert rows < 31 and failed == 0
        assert await dead_letters(settings) == []
        # Raised: the gateway rereads proxies.yaml; the consumers take the domain up after `pause`.
        write_proxies(tmp_path / "p.yaml", proxies, min_interval=0, keys=[key | {"budget": 1000}])
        errs = await asyncio.to_thread(finish, *consumers, timeout=120)
        refused = await _answers(port, 402)
    finally:
        _stop(gw, *consumers)
        await site.close()
    assert landed(database_url) == (31, 31, 0), "\n".join(errs)  # every page once, none failed
    assert await dead_letters(settings) == []
    assert any("budget of key test is spent" in e and f"paused for {pause:g}s" in e for e in errs), errs
    # A pause, not a hot loop of redeliveries: each page met the spent budget a few times at most.
    assert refused <= 3 * 31, refused
    assert float(await redis.get(Names(prefix).gw_credits_key("test")) or 0) == 31


@pytest.mark.timeout(180)
async def test_the_gateway_killed_mid_crawl_and_restarted_loses_nothing(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str, proxies: list[ForwardProxy]
) -> None:
    from demo.site import free_port

    site = await BanningSite("127.0.0.21", pages=40, limit=1000).start()
    settings = Settings(
        amqp_url, REDIS_URL, database_url, str(write_domains(tmp_path / "d.yaml", site)), prefix
    )
    # Spaced out so the kill lands mid-crawl: three exits, 0.2 s apart each.
    path = write_proxies(tmp_path / "p.yaml", proxies, min_interval=0.2, max_wait=4)
    port = free_port("127.0.0.48")
    gw = gateway(settings, path, port)
    consumers: list[subprocess.Popen[str]] = []
    await asyncio.to_thread(migrate, database_url)  # the table is polled before a consumer makes it
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            await until(lambda: _healthy(client, port), what="gateway up", within=30)
            await seed(settings, site.url("a.test"))
            consumers = [consumer(settings, f"http://127.0.0.48:{port}/fetch", KEY) for _ in range(2)]
            await until(lambda: landed(database_url)[0], lambda n: n >= 5, what="a few pages", within=60)
            gw.kill()
            gw.communicate(timeout=30)
            assert landed(database_url)[0] < 41, "the crawl ended before the kill: the test proves nothing"
            gw = gateway(settings, path, port)
            await until(lambda: _healthy(client, port), what="gateway back", within=30)
        errs = await asyncio.to_thread(finish, *consumers, timeout=120)
    finally:
        _stop(gw, *consumers)
        await site.close()
    failed = {url: error for url, (_, error, _) in rows(database_url).items() if error}
    assert landed(database_url) == (41, 41, 0), (failed, [e[-3000:] for e in errs])  # every page, once
    assert await dead_letters(settings) == []
    # The consumers said what happened: an outage their domain paused for, which ended.
    said = [e for e in errs if "cannot reach the fetch service" in e and "its domains pause" in e]
    assert said and all("the fetch service answers again" in e for e in said), "\n".join(errs)


@pytest.mark.timeout(180)
async def test_a_hanging_exit_fails_over_within_the_deadline_and_every_page_lands(
    tmp_path: Path, amqp_url: str, prefix: str, database_url: str
) -> None:
    from demo.site import free_port

    hung = await ForwardProxy("127.0.0.41", "127.0.0.45", hang=True).start()
    good = [await ForwardProxy("127.0.0.41", src).start() for src in ("127.0.0.46", "127.0.0.47")]
    site = await BanningSite("127.0.0.21", pages=20, limit=1000).start()
    settings = Settings(
        amqp_url, REDIS_URL, database_url, str(write_domains(tmp_path / "d.yaml", site)), prefix
    )
    path = write_proxies(tmp_path / "p.yaml", [hung, *good], min_interval=0, max_wait=4)
    port = free_port("127.0.0.48")
    gw = gateway(settings, path, port)
    consumers: list[subprocess.Popen[str]] = []
    try:
        async with httpx.AsyncClient(trust_env=False) as client:
            await until(lambda: _healthy(client, port), what="gateway up", within=30)
        await seed(settings, site.url("a.test"))
        consumers = [consumer(settings, f"http://127.0.0.48:{port}/fetch", KEY) for _ in range(2)]
        await asyncio.to_thread(finish, *consumers, timeout=120)
    finally:
        _stop(gw, *consumers)
        for p in (hung, *good):
            await p.close()
        await site.close()
    assert hung.requests > 0, "the hanging exit was never tried: the test proves nothing"
    assert landed(database_url) == (21, 21, 0)
    # Failed over inside each fetch's deadline: no page needed a second attempt, none went via e0.
    _, _, exits = credits_of_rows(database_url)
    assert exits <= {"e1", "e2"}
    assert {attempts for _, _, attempts in rows(database_url).values()} == {1}
    assert await dead_letters(settings) == []
