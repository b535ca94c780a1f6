"""What the console reads from crawler-api, against the real services: crawls paged with their pages
over time, domains with back-off, answers and robots.txt, dead letters by group, the fleet, the token."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import aio_pika
import pytest
from redis.asyncio import Redis

from crawler.api.console import CONTENT_SECURITY_POLICY, STATIC
from crawler.gateway.proxies import ProxiesConfig
from crawler.gateway.report import Reporter
from crawler.names import Names
from crawler.settings import Settings
from demo.site import Reply, Site, serve
from tests.support.api import ADMIN, READER, Api
from tests.support.crawls import consumer, finish
from tests.support.sites import shops
from tests.support.wait import until


@pytest.fixture
def site() -> Iterator[Site]:
    (a,) = shops(products=12, hosts=["a.test"])
    with serve(a):
        yield a


def test_whoami_names_the_token_and_its_scope_never_its_secret(api: Api) -> None:
    with api.client(READER) as client:
        assert client.get("/v1/whoami").json() == {"name": "dash", "scope": "read"}
    with api.client(ADMIN) as client:
        answer = client.get("/v1/whoami")
        assert answer.json() == {"name": "ops", "scope": "admin"}
        assert ADMIN not in answer.text
    with api.client("wrong-token-0123456789abcdef") as client:
        assert client.get("/v1/whoami").status_code == 401


def test_crawls_are_paged_newest_first_and_a_crawl_has_its_pages_over_time(
    api: Api, settings: Settings, site: Site
) -> None:
    with api.client() as client:
        ids = []
        for n in range(3):
            resp = client.post("/v1/crawls", json={"seeds": [site.url("/")], "label": f"c{n}"})
            assert resp.status_code == 201, resp.text
            ids.append(resp.json()["id"])
        finish(consumer(settings, "--burst"))
        first = client.get("/v1/crawls", params={"limit": 2}).json()
        assert [c["id"] for c in first["crawls"]] == [ids[2], ids[1]]
        assert first["next"] == f"/v1/crawls?before={ids[1]}&limit=2"
        rest = client.get(first["next"]).json()
        assert [c["id"] for c in rest["crawls"]] == [ids[0]] and rest["next"] is None
        assert client.get("/v1/crawls", params={"before": "0" * 16}).json()["crawls"] == []

        crawl = client.get(f"/v1/crawls/{ids[0]}").json()
        assert crawl["state"] == "finished" and crawl["credits"] is None  # fetched directly: no cost
        series = client.get(f"/v1/crawls/{ids[0]}/series").json()
        assert series["crawl"] == ids[0] and series["step"] >= 1
        points = series["domains"]["a.test"]
        assert 1 <= len(points) <= 120
        stored = crawl["counts"]["a.test"]
        # Each crawl fetches the site again; its pages moved to it as it stored them.
        assert round(sum(points), 6) == stored["ok"] + stored["failed"], (points, stored)
        assert client.get("/v1/crawls/nosuchcrawl/series").status_code == 404


def test_a_domain_answering_429_stands_out_with_its_answers_back_off_and_robots_state(
    api: Api, settings: Settings, site: Site
) -> None:
    # Every product refuses its first request: the worker backs off and retries.
    for path in [p for p in site.routes if p.startswith("/product/")]:
        ok = site.routes[path]
        site.routes[path] = lambda count, ok=ok: Reply(429, b"slow down") if count == 0 else ok
    with api.client() as client:
        client.post("/v1/crawls", json={"seeds": [site.url("/")]})
        finish(consumer(settings, "--burst"))
        (domain,) = client.get("/v1/domains").json()["domains"]
    assert domain["domain"] == "a.test"
    answers = domain["answers"]
    assert answers["429"] == 12 and answers["4xx"] >= 12 and answers["5xx"] == 0, answers
    assert answers["ok"] + answers["failed"] == 14, answers  # 13 pages and the 404 of /missing
    assert domain["window"] == 300
    assert domain["refused"] is True, domain
    assert domain["backoff"] < 1 or "rising" in domain["refused_why"], domain
    # The API rounds rates to 4 decimals (0.15625 comes back as 0.1562).
    assert domain["effective_rate"] == pytest.approx(domain["rate"] * domain["backoff"], abs=1e-4)
    assert domain["robots"] == {"state": "none", "origins": 1, "detail": None}  # it has no robots.txt
    assert domain["freshness"] == {"due": 0, "overdue_seconds": None}


def test_a_quiet_domain_is_not_refused_and_knows_no_robots_txt_before_its_first_fetch(api: Api) -> None:
    with api.client(READER) as client:
        (domain,) = client.get("/v1/domains").json()["domains"]
    assert domain["refused"] is False and domain["refused_why"] is None
    assert domain["backoff"] == 1 and domain["effective_rate"] == domain["rate"]
    assert domain["robots"]["state"] == "unknown"
    assert set(domain["answers"]) == {"ok", "failed", "4xx", "5xx", "network", "403", "429"}


def test_dead_letters_are_grouped_by_domain_and_reason(api: Api, settings: Settings) -> None:
    async def publish() -> None:
        connection = await aio_pika.connect(settings.amqp_url)
        async with connection:
            channel = await connection.channel()
            queue = Names(settings.prefix).domain_queue("a.test")
            for body in (b"not json", b"{}"):
                await channel.default_exchange.publish(aio_pika.Message(body), routing_key=queue)

    asyncio.run(publish())
    finish(consumer(settings, "--burst"))
    with api.client(READER) as client:
        summary = client.get("/v1/dead/summary").json()
    assert summary["total"] == 2
    (group,) = summary["groups"]
    assert group["domain"] == "a.test" and group["reason"] == "invalid" and group["count"] == 2
    assert group["last_error"] and group["last_time"]
    with api.client() as client:
        assert client.delete("/v1/dead", params={"domain": "a.test", "reason": "invalid"}).json() == {
            "count": 2
        }
        assert client.get("/v1/dead/summary").json() == {"groups": [], "total": 0}


async def test_the_fleet_lists_a_running_worker_a_gateway_replica_and_freshness_per_domain(
    api: Api, settings: Settings, redis: Redis
) -> None:
    names = Names(settings.prefix)
    proxies = ProxiesConfig.model_validate(
        {
            "exits": [
                {"id": e, "url": f"http://127.0.0.41:{i + 1}"} for i, e in enumerate(["e0", "e1", "e2"])
            ],
            "keys": [{"id": "paid", "key_env": "K", "budget": 10}],
        }
    )
    await redis.set(names.gw_dead_key("e0"), "1", px=30_000)
    await redis.set(names.gw_cool_key("e1", "a.test"), "1", px=30_000)
    await redis.incrbyfloat(names.gw_credits_key("paid"), 2.5)
    await Reporter(redis, names, lambda: proxies, ttl=120).publish()  # live however slow the start
    worker = consumer(settings)
    try:
        with api.client(READER) as client:

            def live() -> bool:
                workers = client.get("/v1/fleet").json()["workers"]
                return any(w["state"] == "live" and "a.test" in w["domains"] for w in workers)

            await until(lambda: asyncio.to_thread(live), within=60, what="the worker in the fleet")
            fleet = client.get("/v1/fleet").json()
        (gateway,) = fleet["gateways"]
        assert gateway["state"] == "live" and gateway["age"] is not None and gateway["pid"] > 0
        assert [(e["id"], e["state"], e["cooling"]) for e in gateway["exits"]] == [
            ("e0", "dead", []),
            ("e1", "cooling", ["a.test"]),
            ("e2", "healthy", []),
        ]
        assert 0 < gateway["exits"][0]["dead_for"] <= 30
        assert gateway["keys"] == [{"id": "paid", "credits": 2.5, "budget": 10.0}]
        assert fleet["freshness"] == [
            {"domain": "a.test", "recrawls": False, "due": 0, "overdue_seconds": None}
        ]
        (w,) = fleet["workers"]
        assert w["role"] == "crawler-consume" and w["age"] is not None and w["pages"] == 0
    finally:
        worker.terminate()
        finish(worker)


def test_the_console_is_served_from_the_package_under_a_strict_policy(api: Api) -> None:
    with api.client(None) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert page.headers["x-content-type-options"] == "nosniff"
        assert "<script>" not in page.text and " style=" not in page.text  # nothing inline
        for name in re.findall(r'(?:src|href)="(/console/[^"]+)"', page.text):
            asset = client.get(name)
            assert asset.status_code == 200, name
            assert asset.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert client.get("/console/../security.py").status_code == 404
        # The API's answers carry the policy too: a JSON body opened in a tab runs nothing.
        assert client.get("/v1/healthz").headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    for path in STATIC.iterdir():
        text = path.read_text()
        # Nothing is loaded from elsewhere: no absolute URL outside comments' prose.
        assert not re.search(r"""(?:src|href|url\(|import|fetch\()\s*=?\s*["']?(?:https?:)?//""", text), path
