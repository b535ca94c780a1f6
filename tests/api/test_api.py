"""crawler-api against the real services: tokens, crawls with ids, cancel, pause and resume, restarts."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import aio_pika
import httpx
import pytest

from crawler.api.console import SECURITY_HEADERS
from crawler.names import HEADER_DOMAIN, HEADER_REASON, Names
from crawler.settings import Settings
from demo.site import Site, serve
from tests.support import api as api_support
from tests.support.api import ADMIN, READER, Api
from tests.support.crawls import consumer, finish
from tests.support.services import queue_info
from tests.support.sites import shops, slow
from tests.support.wait import until

OPEN = {("get", "/v1"), ("get", "/v1/healthz"), ("get", "/v1/readyz")}  # links and probes: no token


@pytest.fixture
def site() -> Iterator[Site]:
    (a,) = shops(products=30, hosts=["a.test"])
    with serve(a):
        yield a


def _crawl(client: httpx.Client, **body: Any) -> dict[str, Any]:
    resp = client.post("/v1/crawls", json=body)
    assert resp.status_code == 201, resp.text
    assert resp.headers["location"] == f"/v1/crawls/{resp.json()['id']}"
    created: dict[str, Any] = resp.json()
    return created


def _operations(api: Api) -> list[tuple[str, str, bool]]:
    """(method, path with sample parameters, needs admin) of every operation the schema lists."""
    with api.client(None) as client:
        schema = client.get("/openapi.json").json()
    out = []
    for path, methods in schema["paths"].items():
        sample = path.replace("{crawl}", "nosuchcrawl").replace("{domain}", "a.test").replace("{page}", "1")
        for method in methods:
            out.append((method, sample, method != "get"))
    return out


def test_every_endpoint_refuses_a_missing_wrong_or_read_only_token(api: Api) -> None:
    operations = _operations(api)
    assert len(operations) >= 14
    for method, path, admin in operations:
        body = {"seeds": ["http://a.test/"]} if path == "/v1/crawls" and method == "post" else None
        for token in (None, "wrong-token-0123456789abcdef", READER, ADMIN):
            with api.client(token) as client:
                resp = client.request(method, path, json=body)
            what = f"{method.upper()} {path} with {'no token' if token is None else token[:5]}"
            if (method, path) in OPEN:
                assert resp.status_code < 400 or resp.status_code == 503, what
            elif token in (None, "wrong-token-0123456789abcdef"):
                assert resp.status_code == 401, what
                assert resp.headers["content-type"] == "application/problem+json", what
                assert resp.headers["www-authenticate"].startswith("Bearer"), what
                assert resp.json()["status"] == 401, what
            elif token == READER and admin:
                assert resp.status_code == 403, what
                assert resp.json()["title"] == "Forbidden", what
            else:
                assert resp.status_code not in (401, 403), (what, resp.text)


def test_bodies_over_the_limit_are_refused_with_413(api: Api) -> None:
    with api.client() as client:
        resp = client.post("/v1/crawls", json={"seeds": ["http://a.test/" + "x" * 70_000]})
        assert resp.status_code == 413
        assert resp.headers["content-type"] == "application/problem+json"
        # Refused before the app sees it, the answer still carries the headers every answer has.
        for name, value in SECURITY_HEADERS.items():
            assert resp.headers[name] == value, name

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it streams
            yield b'{"seeds": ["http://a.test/'
            for _ in range(100):
                yield b"x" * 1000
            yield b'"]}'

        resp = client.post("/v1/crawls", content=chunks(), headers={"content-type": "application/json"})
        assert resp.status_code == 413
        assert resp.headers["content-security-policy"] == SECURITY_HEADERS["Content-Security-Policy"]


def test_two_crawls_of_one_site_both_fetch_it(api: Api, settings: Settings, site: Site) -> None:
    with api.client() as client:
        first = _crawl(client, seeds=[site.url("/")], label="first")
        finish(consumer(settings, "--burst"))
        second = _crawl(client, seeds=[site.url("/")], label="second")
        finish(consumer(settings, "--burst"))
        assert first["id"] != second["id"]
        assert site.hits("/") == 2  # a recrawl: each crawl has its own dedup
        assert site.hits("/product/1") == 2
        for crawl in (first, second):
            got = client.get(f"/v1/crawls/{crawl['id']}").json()
            assert got["state"] == "finished", got
            counts = got["counts"]["a.test"]
            assert counts["ok"] == 31 and counts["failed"] == 1 and counts["pending"] == 0, counts
        listed = client.get("/v1/crawls", params={"state": "finished"}).json()["crawls"]
        assert {c["id"] for c in listed} == {first["id"], second["id"]}
        # Each `extract` field's coverage is kept with the crawl, the second beside the first.
        quality = client.get(f"/v1/crawls/{second['id']}/quality").json()
        (shop,) = quality["domains"]
        assert quality["finished"] and shop["baseline"] == first["id"], quality
        price = next(r for r in shop["fields"] if (r["pages"], r["field"]) == ("all", "price"))
        assert price["now"] == price["before"] == {"n": 30, "of": 31, "rate": round(30 / 31, 4)}, price
        assert quality["alerts"] == 0


async def test_a_cancel_stops_new_fetches_of_the_crawl_and_its_counts(
    api: Api, settings: Settings, site: Site
) -> None:
    slow(site, 0.05)
    prefetch = 2
    worker = consumer(settings, "--prefetch", str(prefetch))
    try:
        with api.client() as client:
            crawl = _crawl(client, seeds=[site.url("/")])
            await until(lambda: len(site.requests) >= 8, within=60, what="the crawl under way")
            resp = client.post(f"/v1/crawls/{crawl['id']}/cancel")
            answered = time.monotonic()
            assert resp.status_code == 200 and resp.json()["state"] == "cancelled", resp.text
            frozen = resp.json()["counts"]
            queue = Names(settings.prefix).domain_queue("a.test")
            # Its queued messages are acked as cancelled, unfetched.
            await until(
                lambda: queue_info(settings.amqp_url, queue).get("messages") == 0,
                within=60,
                what="the cancelled crawl's messages acked",
            )
            after = [path for when, path in list(site.requests) if when > answered]
            # Only fetches already past their last check (in flight) may reach the site.
            assert len(after) <= prefetch, after
            assert client.get(f"/v1/crawls/{crawl['id']}").json()["counts"] == frozen
            assert sum(c["ok"] for c in frozen.values()) < 31
    finally:
        worker.terminate()
        finish(worker)


async def _queue(settings: Settings) -> tuple[int, int]:
    """(ready messages, consumers) of a.test's queue, from the broker itself (the management API lags)."""
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(Names(settings.prefix).domain_queue("a.test"), passive=True)
        result = queue.declaration_result
        return result.message_count or 0, result.consumer_count or 0


async def _consumers(settings: Settings) -> int:
    return (await _queue(settings))[1]


async def test_pause_and_resume_with_two_consumers_and_a_third_started_while_paused(
    api: Api, settings: Settings, site: Site
) -> None:
    slow(site, 0.05)
    workers = [consumer(settings, "--prefetch", "1") for _ in range(2)]
    try:
        with api.client() as client:
            crawl = _crawl(client, seeds=[site.url("/")])
            await until(lambda: _consumers(settings), lambda n: n == 2, within=60, what="two consumers")
            await until(lambda: len(site.requests) >= 4, within=60, what="the crawl under way")
            resp = client.post("/v1/domains/a.test/pause")
            assert resp.status_code == 200 and resp.json()["paused"] is True, resp.text
            await until(
                lambda: _consumers(settings), lambda n: n == 0, within=30, what="consumers off the queue"
            )
            # What they had prefetched finishes; then nothing more is taken.
            at_pause = len(site.requests)
            workers.append(consumer(settings, "--prefetch", "1"))
            await until(
                lambda: (
                    sum(1 for d in client.get("/v1/domains").json()["domains"] if d["paused"]) == 1
                    and _live_workers(settings) == 3
                ),
                within=60,
                what="the third consumer up",
            )
            ready, consumers = await _queue(settings)
            assert consumers == 0 and ready > 0  # its messages wait in the queue, untouched
            # At most what the two had prefetched (one each) was fetched after the pause.
            assert len(site.requests) <= at_pause + 2
            assert client.post("/v1/domains/a.test/resume").json()["paused"] is False
            await until(lambda: _consumers(settings), lambda n: n == 3, within=30, what="all three back")
            await until(
                lambda: client.get(f"/v1/crawls/{crawl['id']}").json()["state"] == "finished",
                within=90,
                what="the crawl finished, nothing lost",
            )
            counts = client.get(f"/v1/crawls/{crawl['id']}").json()["counts"]["a.test"]
            assert counts["ok"] == 31 and counts["failed"] == 1, counts
    finally:
        for worker in workers:
            worker.terminate()
        finish(*workers)


def _live_workers(settings: Settings) -> int:
    import redis

    from tests.support.services import REDIS_URL

    client = redis.Redis.from_url(REDIS_URL)
    try:
        return sum(1 for _ in client.scan_iter(f"{settings.prefix}:worker:*"))
    finally:
        client.close()


def test_an_api_restarted_mid_crawl_loses_no_crawl_record(settings: Settings) -> None:
    with api_support.running(settings) as first, first.client() as client:
        crawl = _crawl(client, seeds=["http://a.test:1/"], label="survivor", max_depth=1)
    with api_support.running(settings) as second, second.client(READER) as client:
        got = client.get(f"/v1/crawls/{crawl['id']}").json()
        assert got["label"] == "survivor" and got["state"] == "running"
        assert got["options"]["max_depth"] == 1
        assert got["counts"]["a.test"]["pending"] == 1


def test_the_ready_line_names_addresses_that_answer_and_polls_are_not_logged(api: Api) -> None:
    assert api.process.stderr is not None
    while "crawler-api ready" not in (line := api.process.stderr.readline()):
        assert line, "crawler-api said no ready line"
    addresses = re.findall(r"http://\S+?(?=[,)\s])", line)
    assert f"{api.base}/" in addresses and f"{api.base}/v1" in addresses, line
    with api.client() as client:
        for address in addresses:
            assert client.get(address).status_code == 200, address
        for _ in range(3):  # what an open console does every 3 s
            client.get("/v1/domains").raise_for_status()
        icon = client.get("/favicon.ico")
        assert icon.status_code == 200 and icon.headers["content-type"] == "image/svg+xml"
    rest = api_support.stop(api.process)
    assert "GET /v1/domains" not in rest, rest


def test_unknown_crawls_and_domains_are_404_problems(api: Api) -> None:
    with api.client() as client:
        for method, path in [
            ("get", "/v1/crawls/nosuch"),
            ("get", "/v1/crawls/nosuch/quality"),
            ("post", "/v1/crawls/nosuch/cancel"),
            ("delete", "/v1/crawls/nosuch"),
            ("post", "/v1/domains/elsewhere.test/pause"),
        ]:
            resp = client.request(method, path)
            assert resp.status_code == 404, (method, path)
            assert resp.headers["content-type"] == "application/problem+json"
        resp = client.post("/v1/crawls", json={"seeds": ["http://elsewhere.test/"]})
        assert resp.status_code == 422 and "domains.yaml" in resp.json()["detail"]


def test_readyz_names_each_service(api: Api) -> None:
    with api.client(None) as client:
        body = client.get("/v1/readyz").json()
    assert body == {"status": "ok", "services": {"rabbitmq": "ok", "redis": "ok", "database": "ok"}}


def test_a_recrawl_publishes_stored_pages_and_refuses_an_unknown_domain(
    api: Api, settings: Settings, site: Site
) -> None:
    with api.client() as client:
        _crawl(client, seeds=[site.url()], max_pages=1)
        finish(consumer(settings, "--burst"))
        resp = client.post("/v1/recrawls", json={"all": True})
        assert resp.status_code == 200, resp.text
        assert resp.json() == {"published": {"a.test": 1}, "due": {"a.test": 0}}
        assert client.post("/v1/recrawls", json={"domains": ["elsewhere.test"]}).status_code == 422
        assert client.post("/v1/recrawls", json={"everything": True}).status_code == 422
    with api.client(READER) as client:
        assert client.post("/v1/recrawls", json={}).status_code == 403


async def test_dead_letters_are_listed_a_page_at_a_time_never_the_whole_queue(
    api: Api, settings: Settings
) -> None:
    from crawler.config import load_config
    from crawler.frontier import exchanges

    names = Names(settings.prefix)
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel(publisher_confirms=True)  # each publish confirmed: queued
        await exchanges.declare(channel, exchanges.topology(load_config(settings.config_path), names))
        for i in range(300):
            message = aio_pika.Message(
                f'{{"v": 1, "url": "http://a.test/gone/{i}"}}'.encode(),
                headers={HEADER_REASON: "transient", HEADER_DOMAIN: "a.test"},
            )
            await channel.default_exchange.publish(message, routing_key=names.dead)
    with api.client(READER) as client:
        first = client.get("/v1/dead", params={"limit": 10}).json()
        # Only what the page needed was taken from the queue (and put back): the rest was never read.
        async with await aio_pika.connect(settings.amqp_url) as connection:
            channel = await connection.channel()
            queue = await channel.get_queue(names.dead)
            read = []
            while (message := await queue.get(fail=False)) is not None:
                read.append(message.redelivered)
        seen, after = [], 0
        while after is not None:
            page = client.get("/v1/dead", params={"limit": 100, "after": after}).json()
            seen += [d["url"] for d in page["dead"]]
            after = page["next"]
    assert [d["url"] for d in first["dead"]] == [f"http://a.test/gone/{i}" for i in range(10)]
    assert first["next"] == 10
    assert sum(read) == 10, f"{sum(read)} of 300 letters were read for a page of 10"
    assert seen == [f"http://a.test/gone/{i}" for i in range(300)]  # every letter once, in order
