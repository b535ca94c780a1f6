"""crawler-gateway shared between API keys, tried as a security reviewer would: proxy credentials
never reach an answer or a log, https goes to the address the guard cleared (DNS rebinding at the
exit), one key's budget, bans and cookies stay its own, and a raw space or CR/LF is refused uncharged."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from redis.asyncio import Redis

from crawler.names import Names
from demo.site import free_port
from tests.support.exits import (
    KEY,
    Certificates,
    ForwardProxy,
    Start,
    TunnelProxy,
    make_certificates,
)

ALICE, BOB, CAROL = "alice-key-0123456789", "bob-key-0123456789ab", "carol-key-0123456789"
KEYS_ENV = {"GW_ALICE": ALICE, "GW_BOB": BOB, "GW_CAROL": CAROL}
KEYS = [{"id": n, "key_env": f"GW_{n.upper()}", "max_concurrency": 100} for n in ("alice", "bob", "carol")]
VENDOR_USER, VENDOR_PASSWORD = "vendoruser", "VendorP4ssw0rd"
NAMES = ["secure.test", "rebind.test"]
APP = "fetch('/api').then(r => r.text()).then(t => { document.body.innerHTML += '<p id=got>' + t + '</p>'; })"


@dataclass
class Sites:
    """One site on 127.0.0.21 over http and https (port `tls`); a listener on 127.0.0.22 at the same
    port stands for what lies behind an exit, and counts the connections it is offered."""

    http: int = 0
    tls: int = 0
    behind: list[str] = field(default_factory=list)
    cookies: list[str | None] = field(default_factory=list)

    def url(self, host: str, path: str = "/", tls: bool = True) -> str:
        return f"https://{host}:{self.tls}{path}" if tls else f"http://{host}:{self.http}{path}"


SITES = web.AppKey("sites", Sites)


async def _page(request: web.Request) -> web.Response:
    sites = request.app[SITES]
    if request.path == "/set":
        response = web.Response(text="<html>set</html>", content_type="text/html")
        response.set_cookie("sid", "alice-session-cookie")
        return response
    if request.path == "/echo":
        sites.cookies.append(request.headers.get("Cookie"))
        return web.Response(
            text=f"<html>cookie={request.headers.get('Cookie')}</html>", content_type="text/html"
        )
    if request.path == "/forbidden":
        return web.Response(status=403, text="<html>no</html>", content_type="text/html")
    if request.path == "/app":
        return web.Response(
            text=f"<html><body><script>{APP}</script></body></html>", content_type="text/html"
        )
    if request.path == "/big":
        return web.Response(text="<html>" + "x" * 5000 + "</html>", content_type="text/html")
    if request.path == "/api":
        return web.Response(text="data-from-the-cleared-address", content_type="text/plain")
    return web.Response(
        text=f"<html><title>{request.host}</title><h1>site</h1></html>", content_type="text/html"
    )


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path, NAMES)


@pytest.fixture
async def sites(certificates: Certificates) -> AsyncIterator[Sites]:
    found = Sites()
    app = web.Application()
    app[SITES] = found
    app.router.add_get("/{tail:.*}", _page)
    # A connection some exit left open does not hold the test's end for aiohttp's default minute.
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2)
    await runner.setup()
    found.http, found.tls = free_port("127.0.0.21"), free_port("127.0.0.21")
    await web.TCPSite(runner, "127.0.0.21", found.http).start()
    await web.TCPSite(runner, "127.0.0.21", found.tls, ssl_context=certificates.server_context()).start()

    async def behind(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        found.behind.append("connected")
        writer.close()

    hidden = await asyncio.start_server(behind, "127.0.0.22", found.tls)
    yield found
    hidden.close()
    await runner.cleanup()


async def ask(base: str, url: str, key: str = KEY, **params: str) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        return await client.get(f"{base}/fetch", params={"url": url, **params}, headers={"X-API-Key": key})


def settings(sites: Sites, certificates: Certificates, **more: object) -> dict[str, object]:
    return {
        "min_interval": 0,
        "resolve": dict.fromkeys(NAMES, "127.0.0.21"),
        "ca_file": str(certificates.ca),
        **more,
    }


async def test_a_refused_connect_carries_no_proxy_credential(
    sites: Sites, certificates: Certificates, gateway: Start, caplog: pytest.LogCaptureFixture
) -> None:
    exit = await TunnelProxy(
        "127.0.0.41", "127.0.0.42", credentials=(VENDOR_USER, VENDOR_PASSWORD), refuse=True
    ).start()
    caplog.set_level(logging.DEBUG)
    proxy_port = exit.url.rpartition(":")[2]
    try:
        exits = [{"id": "e1", "url": exit.url, "username_env": "GW_USER", "password_env": "GW_PASS"}]
        env = {"GW_USER": VENDOR_USER, "GW_PASS": VENDOR_PASSWORD}
        base = await gateway([exit], env=env, **settings(sites, certificates, exits=exits, max_attempts=1))
        answer = await ask(base, sites.url("secure.test"), json_response="true")
    finally:
        await exit.close()
    # The credentials went as the proxy's own header, and got through to its refusal.
    assert (
        exit.authorizations
        and exit.authorizations[0] is not None
        and exit.authorizations[0].startswith("Basic ")
    )
    assert answer.status_code == 503 and answer.headers["Gateway-Error"] == "no_exit"
    text = answer.text
    for secret in (VENDOR_PASSWORD, VENDOR_USER, proxy_port):
        assert secret not in text, text
    found = re.search(r"\(error ([0-9a-f]{12}): the gateway's log says why\)", text)
    assert found, text
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert f"error {found[1]}" in logged and "403" in logged  # the log explains the id
    assert VENDOR_PASSWORD not in logged and VENDOR_USER not in logged


async def test_https_goes_to_the_address_the_guard_cleared_whatever_the_exit_resolves(
    sites: Sites, certificates: Certificates, gateway: Start
) -> None:
    # The exit sees rebind.test at 127.0.0.22 (what DNS rebinding does); the guard cleared 127.0.0.21.
    exit = await TunnelProxy("127.0.0.41", "127.0.0.42", hosts={"rebind.test": "127.0.0.22"}).start()
    try:
        base = await gateway([exit], **settings(sites, certificates, allow_networks=["127.0.0.21/32"]))
        answer = await ask(base, sites.url("rebind.test", "/page"))
        # secure.test is only in the gateway's `resolve` map: https honours it too.
        mapped = await ask(base, sites.url("secure.test", "/page"))
    finally:
        await exit.close()
    assert answer.status_code == 200 and "<title>rebind.test" in answer.text, answer.text
    assert mapped.status_code == 200 and "<title>secure.test" in mapped.text, mapped.text
    assert exit.connects == [f"127.0.0.21:{sites.tls}"] * 2  # CONNECT to the address, never the name
    assert sites.behind == []  # nothing behind the exit was offered a connection


async def test_a_cookie_one_key_was_given_never_goes_out_with_another_key_s_request(
    sites: Sites, certificates: Certificates, gateway: Start
) -> None:
    exit = await TunnelProxy("127.0.0.41", "127.0.0.42").start()
    try:
        base = await gateway([exit], env=KEYS_ENV, **settings(sites, certificates, keys=KEYS))
        assert (await ask(base, sites.url("secure.test", "/set"), key=ALICE)).status_code == 200
        answer = await ask(base, sites.url("secure.test", "/echo"), key=BOB)
    finally:
        await exit.close()
    assert answer.status_code == 200 and sites.cookies == [None], answer.text


async def test_forty_concurrent_requests_spend_a_budget_of_three_no_further(
    proxies: list[ForwardProxy], sites: Sites, gateway: Start, redis: Redis, prefix: str
) -> None:
    key = {"id": "test", "key_env": "GW_TEST_KEY", "budget": 3, "max_concurrency": 100}
    base = await gateway(proxies, min_interval=0, keys=[key], prices={"plain": 1}, max_wait=30)
    answers = await asyncio.gather(
        *(ask(base, sites.url(f"h{i}.test", "/p", tls=False), json_response="true") for i in range(40))
    )
    charged = [a for a in answers if a.status_code == 200 and a.json().get("credits_used") == 1]
    refused = [a for a in answers if a.status_code == 402]
    assert len(charged) == 3 and len(refused) == 37, [a.text for a in answers]
    assert float(await redis.get(Names(prefix).gw_credits_key("test"))) == 3


async def test_a_request_charged_nothing_gives_its_reservation_back(
    proxies: list[ForwardProxy], sites: Sites, gateway: Start, redis: Redis, prefix: str
) -> None:
    key = {"id": "test", "key_env": "GW_TEST_KEY", "budget": 1}
    base = await gateway(proxies, min_interval=0, keys=[key], prices={"plain": 1})
    # Its body is over the limit: the target's failure, found once an exit carried it; uncharged.
    big = sites.url("a.test", "/big", tls=False)
    failed = (await ask(base, big, json_response="true", max_body_bytes="1024")).json()
    assert failed["credits_used"] == 0 and failed["error"]["kind"] == "too_large", failed
    ok = (await ask(base, sites.url("a.test", "/p", tls=False), json_response="true")).json()
    assert ok["credits_used"] == 1, ok
    assert (await ask(base, sites.url("a.test", "/q", tls=False))).status_code == 402
    assert float(await redis.get(Names(prefix).gw_credits_key("test"))) == 1


async def test_one_key_s_bans_do_not_cool_a_domain_for_the_others(
    proxies: list[ForwardProxy], sites: Sites, gateway: Start
) -> None:
    cool = {"base": 30, "max": 60, "jitter": 0}
    base = await gateway(
        proxies, env=KEYS_ENV, keys=KEYS, min_interval=0, cooldown=cool, ban_quorum=2, max_wait=0
    )
    # Alice asks for a page the site forbids through every exit: each ban cools it for her alone.
    for _ in range(2):
        mine = await ask(base, sites.url("a.test", "/forbidden", tls=False), key=ALICE)
        assert mine.status_code == 503 and mine.headers["Gateway-Error"] == "no_exit"
    theirs = await ask(base, sites.url("a.test", "/page", tls=False), key=BOB)
    assert theirs.status_code == 200 and "<h1>site</h1>" in theirs.text, theirs.text
    # A second key meeting the bans is evidence: the exits then rest for every key.
    for _ in range(2):
        await ask(base, sites.url("a.test", "/forbidden", tls=False), key=BOB)
    assert (await ask(base, sites.url("a.test", "/page", tls=False), key=CAROL)).status_code == 503


@pytest.mark.parametrize("bad", ["/a b", "/a\r\nX-Injected: 1", "/a\nb", "/a\tb"])
async def test_a_raw_space_or_line_break_in_url_is_refused_before_any_charge(
    bad: str, proxies: list[ForwardProxy], sites: Sites, gateway: Start, redis: Redis, prefix: str
) -> None:
    base = await gateway(proxies, min_interval=0)
    before = sum(p.requests for p in proxies)
    answer = await ask(base, f"http://a.test:{sites.http}{bad}")
    assert answer.status_code == 400 and "percent-encode" in answer.json()["error"], answer.text
    assert sum(p.requests for p in proxies) == before  # no exit was asked
    assert await redis.get(Names(prefix).gw_credits_key("test")) is None


async def test_a_rendered_https_page_and_its_own_requests_go_to_the_cleared_address(
    sites: Sites, certificates: Certificates, gateway: Start
) -> None:
    from tests.support.browser import chromium

    exit = await TunnelProxy("127.0.0.41", "127.0.0.42", hosts={"rebind.test": "127.0.0.22"}).start()
    render = {"browsers": 1, "contexts": 1, "executable": chromium()}
    try:
        base = await gateway([exit], **settings(sites, certificates, render=render))
        answer = await ask(base, sites.url("rebind.test", "/app"), render_js="true", wait_for="#got")
    finally:
        await exit.close()
    assert answer.status_code == 200 and '<p id="got">data-from-the-cleared-address</p>' in answer.text, (
        answer.text
    )
    # The document and the page's fetch('/api'): each tunnelled to the address the guard cleared.
    assert exit.connects == [f"127.0.0.21:{sites.tls}"] * 2
    assert sites.behind == []
