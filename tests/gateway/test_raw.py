"""crawler-gateway's raw form (json_response absent or false): the target's own status, content type
and body byte for byte, its cost and origin in Gateway-* headers, the gateway's own answers marked
apart from the target's, the body cap, and a long body streamed, never held whole."""

from __future__ import annotations

import asyncio
import functools
import gzip
import hashlib
import logging
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import requests
from redis.asyncio import Redis

from crawler.gateway.forms import CREDITS, ERROR, EXIT, FINAL_URL, INITIAL_STATUS, RENDERED
from crawler.names import Names
from crawler.settings import Settings
from demo.site import Reply, Site, free_port, serve
from tests.support.exits import ENV, KEY, ForwardProxy, Start, write_proxies
from tests.support.services import REDIS_URL, crawler_command, env_for
from tests.support.wait import until

log = logging.getLogger(__name__)

MIB = 1 << 20
HTML = {"Content-Type": "text/html; charset=utf-8"}
PAGE = "<!doctype html><html><title>café</title><h1>ok</h1></html>".encode()
PDF = b"%PDF-1.4\n" + bytes(range(256)) * 64 + b"\n%%EOF\n"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(255, -1, -1)) * 16
ROUTES = {
    "/page": Reply(200, PAGE, {**HTML, "X-Shop": "kept", "Gateway-Error": "forged by the target"}),
    "/missing": Reply(404, b"<html>no such page</html>", HTML),
    "/busy": Reply(503, b"come back later", {"Content-Type": "text/plain", "Retry-After": "7"}),
    "/doc.pdf": Reply(200, PDF, {"Content-Type": "application/pdf"}),
    "/logo.png": Reply(200, PNG, {"Content-Type": "image/png"}),
    "/packed": Reply(200, gzip.compress(PAGE), {**HTML, "Content-Encoding": "gzip"}),
    "/locked": Reply(401, b"<html>log in</html>", {**HTML, "WWW-Authenticate": "Basic"}),
    "/paywall": Reply(402, b"<html>subscribe</html>", HTML),
    "/blocked": Reply(403, b"<html>denied</html>", HTML),
    "/old": Reply(301, b"", {"Location": "/page"}),
    "/intranet": Reply(302, b"", {"Location": "http://10.1.2.3/admin"}),
    "/large": Reply(200, bytes(3 * MIB), {"Content-Type": "application/octet-stream"}),
    # 3 MiB whose length is not said: the cap can only be seen passing while the body streams.
    "/unsized": Reply(200, lambda: (bytes(64 * 1024) for _ in range(48)), {"Content-Type": "video/mp4"}),
}


@pytest.fixture
def target() -> Iterator[Site]:
    site = Site("a.test", "127.0.0.21", free_port("127.0.0.21"), dict(ROUTES))
    with serve(site) as (served,):
        yield served


async def fetch(base: str, url: str, key: str = KEY, **params: str) -> httpx.Response:
    """The gateway's answer in the raw form (unless json_response says otherwise)."""
    async with httpx.AsyncClient(trust_env=False, timeout=60) as client:
        return await client.get(f"{base}/fetch", params={"url": url, **params}, headers={"X-API-Key": key})


async def ledger(redis: Redis, prefix: str) -> float:
    """What the test key was charged, by the gateway's ledger in Redis."""
    return float(await redis.get(Names(prefix).gw_credits_key("test")) or 0)


async def test_a_raw_answer_is_the_targets_status_type_and_body_byte_for_byte(
    target: Site, proxies: list[ForwardProxy], gateway: Start, redis: Redis, prefix: str
) -> None:
    base = await gateway(proxies, min_interval=0, ban_statuses=[403])  # a target's 503 is its answer here
    cases = [
        ("/page", 200, "text/html; charset=utf-8", PAGE),
        ("/missing", 404, "text/html; charset=utf-8", b"<html>no such page</html>"),
        ("/busy", 503, "text/plain", b"come back later"),
        ("/doc.pdf", 200, "application/pdf", PDF),
        ("/logo.png", 200, "image/png", PNG),
        ("/packed", 200, "text/html; charset=utf-8", PAGE),  # gzip on the wire: passed on decoded
    ]
    charged = 0.0
    for path, status, media, body in cases:
        resp = await fetch(base, target.url(path))
        assert (resp.status_code, resp.headers["content-type"], resp.content) == (status, media, body), path
        assert resp.headers[EXIT] in {"e0", "e1", "e2"} and ERROR not in resp.headers
        assert resp.headers[FINAL_URL] == target.url(path) and resp.headers[INITIAL_STATUS] == str(status)
        assert resp.headers[RENDERED] == "false"
        charged += float(resp.headers[CREDITS])
    assert charged == len(cases) == await ledger(redis, prefix)  # 1 credit each, as the ledger says
    page = await fetch(base, target.url("/page"))
    assert page.headers["x-shop"] == "kept" and ERROR not in page.headers  # the target's forgery dropped
    assert (await fetch(base, target.url("/busy"))).headers["retry-after"] == "7"
    envelope = (await fetch(base, target.url("/page"), json_response="true")).json()
    assert envelope["body"].encode() == PAGE and envelope["credits_used"] == 1
    sticky = [await fetch(base, target.url("/page"), session="cart-1", country_code="de") for _ in range(2)]
    assert [r.status_code for r in sticky] == [200, 200] and sticky[0].headers[EXIT] == sticky[1].headers[
        EXIT
    ]
    for wrong in ({"country_code": "FR"}, {"premium_proxy": "true"}, {"json_response": "maybe"}):
        refused = await fetch(base, target.url("/page"), **wrong)
        assert refused.status_code == 400 and refused.headers[ERROR] == "bad_request", wrong
        assert CREDITS not in refused.headers and "error" in refused.json()


async def test_a_followed_redirect_gives_the_final_url_and_the_initial_status(
    target: Site, proxies: list[ForwardProxy], gateway: Start
) -> None:
    base = await gateway(proxies, min_interval=0)
    moved = await fetch(base, target.url("/old"))
    assert moved.status_code == 200 and moved.content == PAGE and moved.headers[CREDITS] == "1"
    assert moved.headers[FINAL_URL] == target.url("/page") and moved.headers[INITIAL_STATUS] == "301"
    kept = await fetch(base, target.url("/old"), follow_redirects="false")
    assert kept.status_code == 301 and kept.headers["location"] == "/page"
    assert kept.headers[FINAL_URL] == target.url("/old")
    envelope = (await fetch(base, target.url("/old"), json_response="true")).json()
    assert envelope["status_code"] == 301 and envelope["final_url"] == target.url("/old")  # not followed


async def test_the_gateways_own_answers_are_told_from_the_targets_401_and_402(
    target: Site, proxies: list[ForwardProxy], gateway: Start, redis: Redis, prefix: str
) -> None:
    key = {"id": "test", "key_env": "GW_TEST_KEY", "budget": 3}
    base = await gateway(proxies, min_interval=0, keys=[key])
    locked, paywall = await fetch(base, target.url("/locked")), await fetch(base, target.url("/paywall"))
    for resp, status in ((locked, 401), (paywall, 402)):  # the target's: charged, never marked
        assert resp.status_code == status and ERROR not in resp.headers and resp.headers[CREDITS] == "1"
    assert locked.headers["www-authenticate"] == "Basic" and locked.content == b"<html>log in</html>"
    stranger = await fetch(base, target.url("/page"), key="not-the-key")
    assert (
        stranger.status_code == 401 and stranger.headers[ERROR] == "key" and CREDITS not in stranger.headers
    )
    refused = await fetch(base, target.url("/intranet"))  # its redirect leads to a private address
    assert refused.status_code == 403 and refused.headers[ERROR] == "refused"
    # A fixed text and an error id: not the address behind the gateway the redirect pointed at.
    assert "10.1.2.3" not in refused.text and re.search(r"\(error [0-9a-f]{12}: ", refused.text)
    # Its own domain, so the bans' cooldowns leave a.test's exits free.
    banned = await fetch(base, f"http://b.test:{target.port}/blocked")
    assert banned.status_code == 503 and banned.headers[ERROR] == "no_exit"
    assert banned.headers["retry-after"] == "1" and CREDITS not in banned.headers
    assert (await fetch(base, target.url("/page"))).headers[CREDITS] == "1"  # the budget's third credit
    spent = await fetch(base, target.url("/page"))
    assert spent.status_code == 402 and spent.headers[ERROR] == "budget" and "budget" in spent.json()["error"]
    assert await ledger(redis, prefix) == 3


async def test_the_body_cap_holds_in_the_raw_form(
    target: Site, proxies: list[ForwardProxy], gateway: Start, redis: Redis, prefix: str
) -> None:
    base = await gateway(proxies[:1], min_interval=0)
    declared = await fetch(base, target.url("/large"), max_body_bytes=str(2 * MIB))
    assert declared.status_code == 502 and declared.headers[ERROR] == "too_large"
    early = await fetch(base, target.url("/unsized"), max_body_bytes="1024")  # passed before any byte went
    assert early.status_code == 502 and early.headers[ERROR] == "too_large"
    with pytest.raises(httpx.RemoteProtocolError, match="incomplete chunked read"):
        await fetch(base, target.url("/unsized"), max_body_bytes=str(2 * MIB))  # passed mid-stream: cut
    whole = await fetch(base, target.url("/unsized"), max_body_bytes=str(4 * MIB))
    assert whole.status_code == 200 and whole.content == bytes(3 * MIB) and whole.headers[CREDITS] == "1"
    assert await ledger(redis, prefix) == 1  # the cut answer was not charged


class Retry(Exception):
    """What the stand-in for Celery's `self.retry()` gives the task to raise."""


class Tasks:
    """Celery's `app.task(bind=True, ...)` as the documented task uses it (Celery is no dependency
    of the project): the task gets itself, whose retry() is the exception to raise."""

    def task(self, **_: object) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        return lambda func: functools.partial(func, SimpleNamespace(retry=Retry))


ROOT = Path(__file__).parents[2]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def documented_examples(api: str, key: str) -> dict[str, Any]:
    """The python blocks of docs/gateway.md, run: their functions, talking to `api` with `key`."""
    namespace: dict[str, Any] = {"app": Tasks()}
    for block in python_blocks(ROOT / "docs" / "gateway.md"):
        exec(block, namespace)
    namespace |= {"API": api, "KEY": key}
    return namespace


async def test_the_documented_examples_work(
    target: Site, proxies: list[ForwardProxy], gateway: Start, redis: Redis, prefix: str
) -> None:
    base = await gateway(proxies, min_interval=0, ban_statuses=[403])
    examples = documented_examples(f"{base}/fetch", KEY)
    scrape, fetch_envelope = examples["scrape"], examples["fetch"]
    page = await asyncio.to_thread(scrape, target.url("/old"))
    assert page == {"url": target.url("/page"), "status": 200, "html": PAGE.decode()}
    assert (await asyncio.to_thread(scrape, target.url("/missing")))["status"] == 404
    with pytest.raises(Retry):
        await asyncio.to_thread(scrape, target.url("/busy"))  # the target's 503: charged, retried
    answers = [
        await asyncio.to_thread(fetch_envelope, target.url("/page")),
        await asyncio.to_thread(fetch_envelope, target.url("/doc.pdf"), html_only="false"),
    ]
    assert answers[0]["body"].encode() == PAGE and answers[1]["body_encoding"] == "base64"
    assert sum(a["credits_used"] for a in answers) + 3 == await ledger(redis, prefix) == 5
    examples["KEY"] = "not-the-key"
    with pytest.raises(RuntimeError, match="crawler-gateway 401 key: missing or unknown API key"):
        await asyncio.to_thread(scrape, target.url("/page"))
    with pytest.raises(requests.HTTPError, match="401"):
        await asyncio.to_thread(fetch_envelope, target.url("/page"))
    assert await ledger(redis, prefix) == 5


def peak_rss(pid: int) -> int:
    """A process's peak resident set size so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")


async def up(base: str) -> bool:
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            return (await client.get(f"{base}/healthz")).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.timeout(120)
async def test_a_20_mib_body_streams_through_without_being_held(
    tmp_path: Path, prefix: str, proxies: list[ForwardProxy]
) -> None:
    big = os.urandom(20 * MIB)
    routes = {
        "/big": Reply(200, big, {"Content-Type": "application/octet-stream"}),
        "/mid": Reply(200, big[: 9 * MIB], {"Content-Type": "application/octet-stream"}),
        "/page": Reply(200, PAGE),
    }
    site = Site("a.test", "127.0.0.21", free_port("127.0.0.21"), routes)
    port = free_port("127.0.0.48")
    base = f"http://127.0.0.48:{port}"
    gw = subprocess.Popen(
        crawler_command(
            "crawler-gateway",
            "--listen",
            f"127.0.0.48:{port}",
            "--proxies",
            str(write_proxies(tmp_path / "p.yaml", proxies[:1])),
        ),
        env=env_for(Settings(redis_url=REDIS_URL, prefix=prefix)) | ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    digest, size = hashlib.sha256(), 0
    try:
        with serve(site):
            await until(lambda: up(base), what="the gateway answering", within=30)
            assert (await fetch(base, site.url("/page"))).content == PAGE  # warmed up
            before = peak_rss(gw.pid)
            limits = {"max_body_bytes": str(25 * MIB), "timeout": "60"}
            query = {"url": site.url("/big"), **limits}
            async with (
                httpx.AsyncClient(trust_env=False, timeout=60) as client,
                client.stream("GET", f"{base}/fetch", params=query, headers={"X-API-Key": KEY}) as resp,
            ):
                async for chunk in resp.aiter_bytes():
                    digest.update(chunk)
                    size += len(chunk)
            streamed = peak_rss(gw.pid)
            # An envelope is held whole: past 10 MB it is refused before anything is fetched.
            whole = {"json_response": "true", "html_only": "false", "timeout": "60"}
            too_big = await fetch(base, site.url("/big"), **whole, max_body_bytes=str(25 * MIB))
            # The instrument's check: a body as an envelope, held whole, shows in the peak.
            envelope = await fetch(base, site.url("/mid"), **whole, max_body_bytes="10000000")
            held = peak_rss(gw.pid)
    finally:
        gw.terminate()
        _, err = gw.communicate(timeout=30)
    log.info(
        "gateway peak RSS: %.1f MiB before, %.1f streaming 20 MiB raw, %.1f after the envelope",
        before / MIB,
        streamed / MIB,
        held / MIB,
    )
    assert resp.status_code == 200 and resp.headers[CREDITS] == "1", err
    assert (size, digest.hexdigest()) == (len(big), hashlib.sha256(big).hexdigest())
    assert streamed - before < 8 * MIB, f"the peak grew {(streamed - before) / MIB:.1f} MiB"
    assert too_big.status_code == 400 and "max_body_bytes in [1024, 10000000]" in too_big.json()["error"]
    assert envelope.status_code == 200 and held - streamed > 9 * MIB
    assert "Traceback" not in err, err
