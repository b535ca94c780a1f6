"""`fetch: api`: the worker's client of a fetch service, its envelope and error semantics, and the
ScrapingBee profile against a local imitation of its documented behaviour."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from crawler.config import parse_config
from crawler.errors import (
    BackendBudgetExhausted,
    BackendBusy,
    BackendDown,
    BackendKeyRejected,
    BackendUnavailable,
    FetchError,
    FetchTimeout,
)
from crawler.fetch.api import ApiEndpoint, ApiFetcher
from crawler.fetch.service_health import BUSY_FIRST
from demo.site import Reply, Site, free_port, page, serve
from tests.support.scrapingbee import ScrapingBee

KEY = "k-123-secret"
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 16 + b"\n%%EOF\n"


class Service:
    """A fetch service answering what the test sets, recording what it was asked."""

    def __init__(self) -> None:
        self.status = 200
        self.answer: dict[str, Any] = {}
        self.asked: list[tuple[dict[str, str], str | None]] = []
        self.port = 0

    async def handle(self, request: web.Request) -> web.Response:
        self.asked.append((dict(request.query), request.headers.get("X-API-Key")))
        return web.json_response(self.answer or {"error": "nope"}, status=self.status)


@pytest.fixture
async def service() -> AsyncIterator[Service]:
    svc = Service()
    app = web.Application()
    app.router.add_get("/fetch", svc.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.47", 0).start()
    svc.port = runner.addresses[0][1]
    yield svc
    await runner.cleanup()


def api_config(profile: str = "envelope") -> Any:
    return parse_config(
        f"api_profile: {profile}\ndefaults: {{timeout: 3, fetch: {{via: api, country: de, session: s1}}}}\n"
        "domains: {a.test: {}}\n"
    )


async def test_the_envelope_request_and_answer(service: Service) -> None:
    config = api_config()
    fetcher = ApiFetcher(config, ApiEndpoint(f"http://127.0.0.47:{service.port}/fetch", KEY))
    service.answer = {
        "status_code": 200,
        "headers": [["Content-Type", "text/html; charset=latin-1"]],
        "body": base64.b64encode("caf\xe9".encode("latin-1")).decode(),
        "body_encoding": "base64",
        "final_url": "http://a.test/",
        "credits_used": 1,
        "duration_ms": 12.5,
        "exit": "dc-1",
    }
    try:
        resp = await fetcher.fetch("http://a.test/", config.rules_for("a.test"))
    finally:
        await fetcher.aclose()
    assert (resp.status_code, resp.body, resp.credits, resp.exit_id) == (200, b"caf\xe9", 1.0, "dc-1")
    query, key = service.asked[0]
    assert key == KEY and "api_key" not in query
    assert query["url"] == "http://a.test/" and query["follow_redirects"] == "false"
    assert (query["country_code"], query["session"], query["render_js"], query["json_response"]) == (
        "DE",
        "s1",
        "false",
        "true",
    )


@pytest.mark.parametrize(
    ("status", "error", "transient"),
    [
        (401, BackendKeyRejected, True),
        (403, BackendKeyRejected, True),
        (402, BackendBudgetExhausted, True),
        (429, BackendBusy, True),
        (500, BackendUnavailable, True),
        (503, BackendUnavailable, True),
        (400, BackendUnavailable, False),
    ],
)
async def test_the_services_own_errors_are_its_own(
    service: Service, status: int, error: type[Exception], transient: bool
) -> None:
    config = api_config()
    fetcher = ApiFetcher(config, ApiEndpoint(f"http://127.0.0.47:{service.port}/fetch", KEY))
    service.status = status
    service.answer = {"error": "refused for a reason"}
    try:
        with pytest.raises(error) as caught:
            await fetcher.fetch("http://a.test/", config.rules_for("a.test"))
    finally:
        await fetcher.aclose()
    assert caught.value.transient is transient  # type: ignore[attr-defined]
    assert "refused for a reason" in str(caught.value) and KEY not in str(caught.value)


async def test_a_target_failure_is_the_targets_and_a_dead_service_is_transient(service: Service) -> None:
    config = api_config()
    fetcher = ApiFetcher(config, ApiEndpoint(f"http://127.0.0.47:{service.port}/fetch", KEY))
    service.answer = {"status_code": None, "error": {"kind": "timeout", "message": "slow"}, "credits_used": 0}
    try:
        with pytest.raises(FetchTimeout):
            await fetcher.fetch("http://a.test/", config.rules_for("a.test"))
    finally:
        await fetcher.aclose()
    gone = ApiFetcher(config, ApiEndpoint("http://127.0.0.47:1/fetch", KEY))
    try:
        with pytest.raises(BackendDown) as caught:
            await gone.fetch("http://a.test/", config.rules_for("a.test"))
    finally:
        await gone.aclose()
    assert caught.value.transient and KEY not in str(caught.value)


async def test_failures_of_the_service_in_a_row_make_an_outage_that_pauses_and_an_answer_ends_it(
    service: Service,
) -> None:
    config = api_config()
    rules = config.rules_for("a.test")
    fetcher = ApiFetcher(config, ApiEndpoint(f"http://127.0.0.47:{service.port}/fetch", KEY))
    service.status = 503
    try:
        # Two could be one odd page's doing: each spends its page's try. The third is an outage.
        for error in (BackendUnavailable, BackendUnavailable, BackendDown, BackendDown):
            with pytest.raises(FetchError) as caught:
                await fetcher.fetch("http://a.test/", rules)
            assert type(caught.value) is error, caught.value
        assert isinstance(caught.value, BackendDown) and 1.0 <= caught.value.pause <= 30.0
        assert 0 <= caught.value.lasted < 30 and "503" in str(caught.value)
        service.status = 200
        service.answer = {"status_code": 200, "headers": [], "body": "ok"}
        await fetcher.fetch("http://a.test/", rules)
        service.status = 503
        with pytest.raises(BackendUnavailable) as after:
            await fetcher.fetch("http://a.test/", rules)
        assert type(after.value) is BackendUnavailable  # the answer ended the outage
    finally:
        await fetcher.aclose()


async def test_a_streamed_answer_ends_an_outage_and_a_back_off_as_a_fetched_one_does(
    service: Service, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="crawler.fetch")
    config = api_config()
    rules = config.rules_for("a.test")
    fetcher = ApiFetcher(config, ApiEndpoint(f"http://127.0.0.47:{service.port}/fetch", KEY))
    try:
        for status, error in ((503, BackendUnavailable), (429, BackendBusy), (429, BackendBusy)):
            service.status = status
            with pytest.raises(error):
                await fetcher.fetch("http://a.test/", rules)
        service.status = 200
        service.answer = {"status_code": 200, "headers": [["Content-Type", "text/html"]], "body": "<p>"}
        async with fetcher.stream("http://a.test/sitemap.xml", rules) as answer:
            assert answer.status_code == 200 and b"".join([p async for p in answer.pieces])
        assert "the fetch service answers again after 1 failed fetches" in caplog.text
        service.status = 429
        with pytest.raises(BackendBusy):
            await fetcher.fetch("http://a.test/", rules)
        service.status = 200
        began = time.monotonic()
        await fetcher.fetch("http://a.test/", rules)
    finally:
        await fetcher.aclose()
    # The 429 after the stream is a first one again: its back-off is BUSY_FIRST's, not a third's.
    assert time.monotonic() - began < 4 * BUSY_FIRST


@pytest.fixture
def target() -> Any:
    site = Site(
        "a.test",
        "127.0.0.21",
        free_port("127.0.0.21"),
        {
            "/": page("Home", ["/x"]),
            "/gone": Reply(404, b"<html>no</html>"),
            "/locked": Reply(401, b"<html>log in</html>"),
            "/paywall": Reply(402, b"<html>subscribe</html>"),
            "/doc.pdf": Reply(200, PDF, {"Content-Type": "application/pdf"}),
        },
    )
    with serve(site) as (served,):
        yield served


async def test_scrapingbee_profile_against_its_imitation(target: Site) -> None:
    bee = await ScrapingBee(KEY, credits=12).start()
    config = api_config("scrapingbee")
    fetcher = ApiFetcher(config, ApiEndpoint(bee.endpoint, KEY))
    url = f"http://127.0.0.21:{target.port}/"
    rules = config.rules_for("a.test")
    try:
        resp = await fetcher.fetch(url, rules)
        assert resp.status_code == 200 and b"Home" in resp.body and resp.credits == 1
        assert resp.content_type and resp.content_type.startswith("text/html")
        missing = await fetcher.fetch(url + "gone", rules)
        assert missing.status_code == 404 and missing.credits == 1  # the target's 404, charged
        call = bee.calls[0]
        assert (call["render_js"], call["country_code"], call["transparent_status_code"]) == (
            "false",
            "de",
            "true",
        )
        bee.fail_next = 1
        with pytest.raises(BackendUnavailable):
            await fetcher.fetch(url, rules)
        premium = rules.model_copy(update={"fetch": rules.fetch.model_copy(update={"premium": True})})
        assert (await fetcher.fetch(url, premium)).credits == 10
        with pytest.raises(BackendBudgetExhausted):  # 12 credits: 1 + 1 + 10 spent
            await fetcher.fetch(url, rules)
        assert bee.charged == 12
        wrong = ApiFetcher(config, ApiEndpoint(bee.endpoint, "wrong"))
        try:
            with pytest.raises(BackendKeyRejected):
                await wrong.fetch(url, rules)
        finally:
            await wrong.aclose()
    finally:
        await fetcher.aclose()
        await bee.close()


async def test_scrapingbee_raw_answers_are_the_targets_even_a_401_or_402(target: Site) -> None:
    # Its raw form: the target's status and body, told from ScrapingBee's own 401 by its Spb- headers.
    bee = await ScrapingBee(KEY).start()
    config = api_config("scrapingbee")
    fetcher = ApiFetcher(config, ApiEndpoint(bee.endpoint, KEY))
    base = f"http://127.0.0.21:{target.port}"
    rules = config.rules_for("a.test")
    try:
        for path, status in (("/locked", 401), ("/paywall", 402)):
            resp = await fetcher.fetch(base + path, rules)
            assert (resp.status_code, resp.credits, resp.final_url) == (status, 1, base + path)
        pdf = await fetcher.fetch(base + "/doc.pdf", rules, html_only=False)
        assert (pdf.body, pdf.content_type) == (PDF, "application/pdf")  # byte for byte
    finally:
        await fetcher.aclose()
        await bee.close()


async def test_the_endpoint_comes_from_settings_read_once_and_the_key_stays_out_of_reprs() -> None:
    from crawler.errors import ConfigError
    from crawler.fetch.api import RoutingFetcher
    from crawler.settings import Settings
    from crawler.worker.wiring import make_fetchers

    settings = Settings.from_env(
        {"CRAWLER_FETCH_API_URL": " http://127.0.0.47:9/fetch ", "CRAWLER_FETCH_API_KEY": KEY}
    )
    assert (settings.fetch_api_url, settings.fetch_api_key) == ("http://127.0.0.47:9/fetch", KEY)
    assert KEY not in repr(settings)
    config = parse_config("defaults: {fetch: api}\ndomains: {a.test: {}}\n", "d.yaml")
    fetcher, backend = make_fetchers(config, settings)
    try:
        assert isinstance(fetcher, RoutingFetcher) and fetcher.api is not None and backend == "gateway"
        assert KEY not in repr(ApiEndpoint.checked(settings.fetch_api_url, settings.fetch_api_key))
    finally:
        await fetcher.aclose()
    with pytest.raises(ConfigError, match="CRAWLER_FETCH_API_URL is not set"):
        make_fetchers(config, Settings.from_env({}))


async def test_a_garbled_scrapingbee_answer_leaves_its_key_out_of_every_error_and_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import asyncio
    import logging

    async def garbled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n")  # not HTTP aiohttp reads
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbled, "127.0.0.47", 0)
    port = server.sockets[0].getsockname()[1]
    caplog.set_level(logging.DEBUG)
    fetcher = ApiFetcher(api_config("scrapingbee"), ApiEndpoint(f"http://127.0.0.47:{port}/api/v1/", KEY))
    try:
        with pytest.raises(BackendUnavailable) as raised:
            await fetcher.fetch("http://a.test/", api_config("scrapingbee").rules_for("a.test"))
    finally:
        await fetcher.aclose()
        server.close()
    text = f"{raised.value} {raised.value!r} {raised.value.args}"
    assert "cannot reach the fetch service" in text and KEY not in text, text
    assert KEY not in caplog.text
