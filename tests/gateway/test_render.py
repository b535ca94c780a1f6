"""crawler-gateway's renderer against a site whose content exists only after its scripts run: the
DOM the caller gets, the guard on every request a page makes, deadlines, crashes, sessions."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from redis.asyncio import Redis

from crawler.config import parse_config
from crawler.errors import ConfigError
from crawler.fetch.api import ApiEndpoint, ApiFetcher
from crawler.gateway.forms import CREDITS, FINAL_URL, RENDERED
from crawler.gateway.server import Gateway
from crawler.names import Names
from tests.support.browser import chromium
from tests.support.exits import ForwardProxy, write_proxies
from tests.support.scripted import ScriptedSite
from tests.support.wait import until

KEY = "render-key-0123456789"
ALICE, BOB = "alice-render-key-0123", "bob-render-key-012345"
METRICS_TOKEN = "render-metrics-token-0123"
ENV = {"GW_TEST_KEY": KEY, "GW_ALICE": ALICE, "GW_BOB": BOB, "GW_METRICS": METRICS_TOKEN}
TWO_KEYS = [{"id": "alice", "key_env": "GW_ALICE"}, {"id": "bob", "key_env": "GW_BOB"}]
Start = Callable[..., Awaitable[tuple[str, Gateway]]]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def site() -> AsyncIterator[ScriptedSite]:
    s = await ScriptedSite("127.0.0.21").start()
    yield s
    await s.close()


@pytest.fixture
async def exit_proxy() -> AsyncIterator[ForwardProxy]:
    p = await ForwardProxy("127.0.0.41", "127.0.0.42").start()
    yield p
    await p.close()


@pytest.fixture
async def gateway(
    tmp_path: Path, redis: Redis, prefix: str, exit_proxy: ForwardProxy
) -> AsyncIterator[Start]:
    runners: list[web.AppRunner] = []

    async def start(**settings: Any) -> tuple[str, Gateway]:
        settings.setdefault("render", {"browsers": 1, "contexts": 2, "executable": chromium()})
        if settings["render"] is None:
            del settings["render"]
        path = write_proxies(tmp_path / f"p{len(runners)}.yaml", [exit_proxy], min_interval=0, **settings)
        gw = Gateway(redis, Names(prefix), str(path), ENV)
        runner = web.AppRunner(gw.app(), access_log=None)
        await runner.setup()
        runners.append(runner)
        await web.TCPSite(runner, "127.0.0.41", 0).start()
        return f"http://127.0.0.41:{runner.addresses[0][1]}", gw

    yield start
    for runner in runners:
        await runner.cleanup()


async def render(base: str, url: str, key: str = KEY, **params: str) -> dict[str, Any]:
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        resp = await client.get(
            f"{base}/fetch",
            params={"url": url, "render_js": "true", "json_response": "true", **params},
            headers={"X-API-Key": key},
        )
    assert resp.status_code == 200, resp.text
    answer: dict[str, Any] = resp.json()
    return answer


def metric(gw: Gateway, name: str, **labels: str) -> float:
    return gw.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_content_links_and_load_more_exist_in_the_rendered_dom(
    site: ScriptedSite, gateway: Start
) -> None:
    base, gw = await gateway()
    answer = await render(base, site.url("a.test"), wait_until="networkidle", wait_for="[data-done]")
    body = answer["body"]
    assert answer["rendered"] is True and answer["credits_used"] == 5 and answer["status_code"] == 200
    assert answer["final_url"] == site.url("a.test")
    assert all(f'href="/item/{i}"' in body for i in range(3))  # inserted after a fetch()
    assert '<p id="price">12.50</p>' in body
    assert 'href="/late"' in body  # a link added 300 ms after the script ran
    assert body.count('class="more"') == 6  # "load more", clicked by the page, appended three pages
    # Images are blocked by default; the page's own requests went through the exit.
    assert "/img/big.png" not in site.paths() and "/api/more?page=3" in site.paths()
    assert metric(gw, "crawler_gateway_render_requests_total", outcome="blocked") >= 1
    assert metric(gw, "crawler_gateway_renders_total", outcome="rendered") == 1
    plain = await render(base, site.url("a.test"), render_js="false")
    assert plain["rendered"] is False and "item 0" not in plain["body"] and plain["credits_used"] == 1


async def test_a_client_side_redirect_gives_the_final_url(site: ScriptedSite, gateway: Start) -> None:
    base, _ = await gateway()
    answer = await render(base, site.url("a.test", "/redirect"))
    assert answer["final_url"] == site.url("a.test", "/landing")
    assert "<title>landing</title>" in answer["body"] and 'href="/from-landing"' in answer["body"]
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:  # the raw form: the same DOM
        resp = await client.get(
            f"{base}/fetch",
            params={"url": site.url("a.test", "/redirect"), "render_js": "true"},
            headers={"X-API-Key": KEY},
        )
    assert resp.status_code == 200 and "<title>landing</title>" in resp.text
    assert (resp.headers[FINAL_URL], resp.headers[RENDERED], resp.headers[CREDITS]) == (
        site.url("a.test", "/landing"),
        "true",
        "5",
    )
    assert resp.headers["content-type"] == "text/html; charset=utf-8"


async def test_a_script_asking_for_a_loopback_admin_url_is_refused_logged_and_the_page_renders(
    gateway: Start, caplog: pytest.LogCaptureFixture
) -> None:
    admin_hits: list[str] = []

    async def admin_page(request: web.Request) -> web.Response:
        admin_hits.append(request.path)
        return web.Response(text="secret")

    app = web.Application()
    app.router.add_get("/{tail:.*}", admin_page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.22", 0).start()
    admin = f"http://127.0.0.22:{runner.addresses[0][1]}/admin"
    site = await ScriptedSite("127.0.0.21", admin=admin).start()
    caplog.set_level(logging.WARNING, logger="crawler.gateway.render")
    try:
        base, gw = await gateway()
        answer = await render(base, site.url("a.test", "/probe"), wait_for="#after")
    finally:
        await site.close()
        await runner.cleanup()
    assert '<p id="after">rendered</p>' in answer["body"] and answer["rendered"] is True
    assert admin_hits == []  # never reached, neither by the browser nor by the gateway
    assert metric(gw, "crawler_gateway_render_requests_total", outcome="refused") == 2
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert f"refused GET {admin}" in logged and "169.254.169.254" in logged


async def test_a_page_that_never_settles_is_a_timeout_and_is_not_charged(
    site: ScriptedSite, gateway: Start
) -> None:
    base, gw = await gateway()
    answer = await render(base, site.url("a.test", "/restless"), wait_until="networkidle", timeout="3")
    assert answer["error"]["kind"] == "timeout" and answer["credits_used"] == 0, answer
    assert "did not settle (networkidle)" in answer["error"]["message"]
    assert metric(gw, "crawler_gateway_renders_total", outcome="timeout") == 1
    # The browser is still good for the next page.
    assert (await render(base, site.url("a.test", "/landing")))["rendered"] is True


async def test_a_crashed_browser_is_replaced_and_the_page_rendered_again(
    site: ScriptedSite, gateway: Start
) -> None:
    site.slow_for = 2.0
    base, gw = await gateway()
    assert gw.renderer is not None
    pid = gw.renderer.pool.pids[0]
    pending = asyncio.ensure_future(render(base, site.url("a.test", "/slow"), wait_for="#slow", timeout="30"))
    await until(lambda: "/api/slow" in site.paths(), what="the page's script running", within=30)
    os.kill(pid, signal.SIGKILL)
    answer = await pending
    assert '<p id="slow">slow content</p>' in answer["body"], answer
    assert site.paths().count("/api/slow") == 2 and site.paths().count("/slow") == 1
    assert metric(gw, "crawler_gateway_browser_restarts_total", reason="crash") == 1
    assert gw.renderer.pool.pids and gw.renderer.pool.pids[0] != pid


async def test_a_sticky_session_keeps_its_cookies_and_a_fresh_render_has_none(
    site: ScriptedSite, gateway: Start
) -> None:
    base, _ = await gateway()
    first = await render(base, site.url("a.test", "/cookie"), session="s1")
    assert '<p id="seen"></p>' in first["body"]
    again = await render(base, site.url("a.test", "/cookie"), session="s1")
    assert '<p id="seen">visited=1</p>' in again["body"]
    fresh = await render(base, site.url("a.test", "/cookie"))
    assert '<p id="seen"></p>' in fresh["body"]


async def test_two_keys_naming_one_session_never_share_cookies_or_storage(
    site: ScriptedSite, gateway: Start
) -> None:
    base, _ = await gateway(keys=TWO_KEYS, metrics_token_env="GW_METRICS")
    kept = site.url("a.test", "/kept")
    await render(base, kept, key=ALICE, session="cart-1")
    alice = (await render(base, kept, key=ALICE, session="cart-1"))["body"]
    assert '<p id="seen">visited=1</p>' in alice and '<p id="stored">stored-before</p>' in alice
    bob = (await render(base, kept, key=BOB, session="cart-1"))["body"]
    assert '<p id="seen"></p>' in bob and '<p id="stored"></p>' in bob, bob
    # Two sessions now (one per key); how many, and renders in flight, only to the metrics token.
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        anyone = (await client.get(f"{base}/healthz")).json()["render"]
        operator = {"Authorization": f"Bearer {METRICS_TOKEN}"}
        told = (await client.get(f"{base}/healthz", headers=operator)).json()["render"]
    assert anyone == {"browsers": 1, "contexts": 2} and told["sessions"] == 2


async def test_a_rendered_page_past_max_body_bytes_is_too_large_and_not_charged(
    site: ScriptedSite, gateway: Start
) -> None:
    base, _ = await gateway()
    grown = await render(base, site.url("a.test", "/grow"), max_body_bytes="2048")
    assert grown["error"]["kind"] == "too_large" and grown["credits_used"] == 0, grown
    assert "exceeds max_body_bytes (2048)" in grown["error"]["message"]
    whole = await render(base, site.url("a.test", "/grow"), max_body_bytes="10000")
    assert whole["rendered"] is True and "x" * 5000 in whole["body"]


async def test_a_redirect_to_another_origin_carries_no_cookie(tmp_path: Path) -> None:
    import aiohttp
    from prometheus_client import CollectorRegistry

    from crawler.gateway.render.intercept import Answer, Interception
    from crawler.gateway.render.metrics import RenderMetrics
    from demo.site import free_port

    seen: list[tuple[str, str | None]] = []
    port = free_port("127.0.0.21", "127.0.0.23")

    async def serve(request: web.Request) -> web.Response:
        seen.append((f"{request.host}{request.path}", request.headers.get("Cookie")))
        if request.path == "/away":
            raise web.HTTPFound(f"http://127.0.0.23:{port}/landed")
        if request.path == "/here":
            raise web.HTTPFound("/landed")
        return web.Response(text="landed")

    app = web.Application()
    app.router.add_get("/{tail:.*}", serve)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    for ip in ("127.0.0.21", "127.0.0.23"):
        await web.TCPSite(runner, ip, port).start()
    try:
        async with aiohttp.ClientSession(trust_env=False) as http:

            async def send(method: str, url: str, headers: dict[str, str], body: bytes | None) -> Answer:
                async with http.request(method, url, headers=headers, data=body, allow_redirects=False) as r:
                    return Answer(r.status, list(r.headers.items()), await r.read())

            page = f"http://127.0.0.21:{port}/"
            hops = Interception(
                page, Answer(200, [], b""), send, frozenset(), RenderMetrics(CollectorRegistry()), 10
            )
            for path in ("/here", "/away"):
                _, answer = await hops._follow(
                    "GET", f"http://127.0.0.21:{port}{path}", {"cookie": "sid=s3"}, None
                )
                assert answer.body == b"landed"
    finally:
        await runner.cleanup()
    assert seen == [
        (f"127.0.0.21:{port}/here", "sid=s3"),
        (f"127.0.0.21:{port}/landed", "sid=s3"),  # the same origin keeps it
        (f"127.0.0.21:{port}/away", "sid=s3"),
        (f"127.0.0.23:{port}/landed", None),  # another origin never sees it
    ]


async def test_chromium_runs_with_its_sandbox_when_render_sandbox_is_set(gateway: Start) -> None:
    from crawler.gateway.render.processes import cmdline

    _, gw = await gateway()
    assert gw.renderer is not None and "--no-sandbox" in cmdline(gw.renderer.pool.pids[0])
    try:
        _, boxed = await gateway(
            render={"browsers": 1, "contexts": 1, "executable": chromium(), "sandbox": True}
        )
    except ConfigError as exc:
        # As root, or without unprivileged user namespaces, Chromium refuses to start sandboxed: it
        # is said at start, never run without the sandbox asked for.
        assert "cannot launch" in str(exc)
        return
    assert boxed.renderer is not None and "--no-sandbox" not in cmdline(boxed.renderer.pool.pids[0])


async def test_render_options_and_a_gateway_without_a_renderer(
    site: ScriptedSite, gateway: Start, tmp_path: Path
) -> None:
    base, _ = await gateway(render=None)
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        url = f"{base}/fetch"
        resp = await client.get(
            url, params={"url": site.url("a.test"), "render_js": "true"}, headers={"X-API-Key": KEY}
        )
        assert resp.status_code == 400 and "no renderer" in resp.json()["error"]
    config = parse_config("domains: {a.test: {fetch: {via: api, render_js: true}}}\n")
    fetcher = ApiFetcher(config, ApiEndpoint(f"{base}/fetch", KEY))
    try:
        with pytest.raises(
            ConfigError, match=r"render_js in a.test.*has no renderer: add a `render:` section"
        ):
            await fetcher.check_renders(config)
    finally:
        await fetcher.aclose()
    base, _ = await gateway()
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        for params, message in (
            ({"wait_until": "idle"}, "wait_until='idle'"),
            ({"wait_for": "p[["}, "is not a CSS selector"),
        ):
            resp = await client.get(
                f"{base}/fetch",
                params={"url": site.url("a.test"), "render_js": "true", **params},
                headers={"X-API-Key": KEY},
            )
            assert resp.status_code == 400 and message in resp.json()["error"], resp.text
    fetcher = ApiFetcher(config, ApiEndpoint(f"{base}/fetch", KEY))
    try:
        await fetcher.check_renders(config)  # this one renders: no error
    finally:
        await fetcher.aclose()
