"""crawler-gateway's HTTP service: the envelope (GET /fetch), /metrics and /healthz.

Each request: the key (constant-time), the private-network guard on the target, then up to
max_attempts exits from the pool, the first reservation also checking the key's budget and
concurrency; a ban cools that (exit, domain) pair down and the next attempt takes another exit. Only an
answer that counts (the target answered, no ban) is charged. All state lives in Redis (two script
calls a request when nothing goes wrong), so replicas behind one address act as one gateway.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import httpcore
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from redis.asyncio import Redis
from yarl import URL

from crawler.errors import BadResponse, ConfigError, FetchError, Refused, TooLarge
from crawler.fetch.connect import AddressPolicy, GuardedBackend
from crawler.fetch.decoding import ACCEPT_ENCODING
from crawler.fetch.fetcher import HTML_TYPES, REDIRECTS, read_body
from crawler.gateway.ledger import find_key
from crawler.gateway.pool import Outcome, Pool, Settled
from crawler.gateway.proxies import ApiKey, Exit, ProxiesConfig, load_proxies
from crawler.gateway.render import Document, RenderAsk, Rendered, Renderer, RenderFailed, render_options
from crawler.gateway.session import exit_session
from crawler.names import Names

log = logging.getLogger("crawler.gateway")

DEFAULT_TIMEOUT = 10.0
MOST_TIMEOUT = 120.0
DEFAULT_BODY = 5_000_000
MOST_BODY = 50_000_000
RELOAD_POLL = 1.0
PROBE_EVERY = 5.0
DROPPED_HEADERS = frozenset({"content-encoding", "content-length", "transfer-encoding", "connection"})
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ProxyFailed(Exception):
    """The exit itself failed (refused, 407, tunnel, hung): not the target's doing."""


@dataclass(frozen=True, slots=True)
class Ask:
    """One envelope request, validated."""

    url: str
    host: str
    render_js: bool
    premium: bool
    country: str | None
    session: str | None
    html_only: bool
    timeout: float
    max_body_bytes: int


class GatewayMetrics:
    """The gateway's Prometheus metrics (listed in docs/metrics.md)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "crawler_gateway_exit_requests",
            "Requests sent through an exit, by outcome",
            ["exit", "outcome"],
            registry=r,
        )
        self.bans = Counter(
            "crawler_gateway_exit_bans",
            "Bans seen through an exit, by reason",
            ["exit", "reason"],
            registry=r,
        )
        self.cooldowns = Counter(
            "crawler_gateway_exit_cooldown_seconds",
            "Cooldown imposed on an exit's (exit, domain) pairs after bans, in seconds",
            ["exit"],
            registry=r,
        )
        self.latency = Histogram(
            "crawler_gateway_exit_latency_seconds",
            "Duration of a request through an exit",
            ["exit"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.credits = Counter(
            "crawler_gateway_credits", "Credits charged, by API key id", ["key"], registry=r
        )
        self.answers = Counter(
            "crawler_gateway_answers",
            "Envelope answers, by HTTP status of the gateway's own answer",
            ["code"],
            registry=r,
        )
        # This replica's load, what its autoscaler reads (deploy/k8s/gateway/scaledobject.yaml):
        # requests held open, including those waiting for a free exit.
        self.inflight = Gauge(
            "crawler_gateway_inflight_requests", "Envelope requests this replica is serving now", registry=r
        )


def _flag(query: Mapping[str, str], name: str, default: bool) -> bool:
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"{name}={value!r}: use true or false")


def _ask(query: Mapping[str, str]) -> Ask:
    """The envelope request from its query; ValueError saying what is wrong."""
    url = query.get("url", "")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url: an absolute http(s) URL is required")
    if not _flag(query, "json_response", True):
        raise ValueError("json_response=false is not served: the answer is the JSON envelope")
    if _flag(query, "follow_redirects", False):
        raise ValueError(
            "follow_redirects=true is not served: a redirect is returned, each hop is the caller's"
        )
    country = query.get("country_code") or None
    if country is not None and not (len(country) == 2 and country.isalpha()):
        raise ValueError(f"country_code={country!r}: a two-letter country code")
    session = query.get("session") or None
    if session is not None and not (len(session) <= 64 and all(c.isalnum() or c in "_.-" for c in session)):
        raise ValueError("session: up to 64 letters, digits, '_', '.' or '-'")
    try:
        timeout = float(query.get("timeout", DEFAULT_TIMEOUT))
        body = int(query.get("max_body_bytes", DEFAULT_BODY))
    except ValueError:
        raise ValueError("timeout and max_body_bytes are numbers") from None
    if not 0 < timeout <= MOST_TIMEOUT or not 1024 <= body <= MOST_BODY:
        raise ValueError(f"timeout in (0, {MOST_TIMEOUT:g}] s, max_body_bytes in [1024, {MOST_BODY}]")
    return Ask(
        url,
        parts.hostname.lower(),
        _flag(query, "render_js", False),
        _flag(query, "premium_proxy", False),
        country.upper() if country else None,
        session,
        _flag(query, "html_only", True),
        timeout,
        body,
    )


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


class Gateway:
    """The gateway of one process; its state is Redis's, its config proxies.yaml's (reloaded live)."""

    def __init__(self, redis: Redis, names: Names, path: str, env: Mapping[str, str] | None = None) -> None:
        self._redis = redis
        self._names = names
        self._path = path
        self._env = os.environ if env is None else env
        loaded = load_proxies(path, self._env)
        self._mtime = loaded.mtime
        self.metrics = GatewayMetrics()
        self.pool = Pool(redis, names, loaded.config)
        self._apply(loaded.config)
        self._session = exit_session()
        self._tasks: list[asyncio.Task[None]] = []
        render = loaded.config.render
        self.renderer = Renderer(render, self.metrics.registry, loaded.config.user_agent) if render else None

    def _apply(self, config: ProxiesConfig) -> None:
        self.config = config
        self.pool.config = config
        self._keys = {self._env[k.key_env]: k for k in config.keys}
        self._proxies = {e.id: e.proxy_url(self._env) for e in config.exits}
        self._guard = GuardedBackend(
            config.resolve, AddressPolicy(config.allow_private_networks, config.allow_networks)
        )

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application()
        app.router.add_get("/fetch", self.fetch)
        app.router.add_get("/metrics", self.serve_metrics)
        app.router.add_get("/healthz", self.healthz)
        app.on_startup.append(self._start)
        app.on_cleanup.append(self._stop)
        return app

    async def _start(self, _: web.Application) -> None:
        if self.renderer is not None:
            await self.renderer.start()
        self._tasks = [asyncio.create_task(self._watch()), asyncio.create_task(self._probe())]

    async def _stop(self, _: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._session.close()
        if self.renderer is not None:
            await self.renderer.close()

    # -- the envelope ----------------------------------------------------------------------------

    async def fetch(self, request: web.Request) -> web.Response:
        """GET /fetch?url=…: the target's answer through a pool exit, as the JSON envelope."""
        with self.metrics.inflight.track_inprogress():
            response = await self._fetch(request)
        self.metrics.answers.labels(str(response.status)).inc()
        return response

    async def _fetch(self, request: web.Request) -> web.Response:
        key = find_key(self._keys, request.headers.get("X-API-Key", ""))
        if key is None:
            return _error(401, "missing or unknown API key (X-API-Key)")
        try:
            ask = _ask(request.query)
        except ValueError as exc:
            return _error(400, str(exc))
        how: RenderAsk | None = None
        if ask.render_js:
            if self.renderer is None:
                return _error(
                    400, "render_js=true: this gateway has no renderer (add `render:` to its proxies.yaml)"
                )
            try:
                how = render_options(request.query)
            except ValueError as exc:
                return _error(400, str(exc))
        price = self.config.prices.price(ask.render_js, ask.premium)
        exits = self.pool.candidates(ask.country, ask.premium)
        if not exits:
            tier = "premium" if ask.premium else "datacenter"
            return _error(400, f"no {tier} exit in country {ask.country or 'any'} in proxies.yaml")
        return await self._through_exits(ask, key, exits, price, how)

    async def _through_exits(
        self, ask: Ask, key: ApiKey, exits: list[Exit], price: float, how: RenderAsk | None = None
    ) -> web.Response:
        started = time.monotonic()
        deadline = started + ask.timeout
        try:
            parts = urlsplit(ask.url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
            ips = await self._guard.allowed(ask.host, port)
        except Refused as exc:
            return self._target_error("refused", str(exc), started)
        except (httpcore.ConnectError, OSError, ValueError) as exc:
            return self._target_error("connect", f"cannot resolve {ask.host}: {exc}", started)
        # Plain http is pinned to the address the guard cleared, so the proxy cannot be steered
        # elsewhere by its own resolver; https goes by name through CONNECT (TLS needs it).
        pinned = str(ips[0]) if parts.scheme == "http" else None
        domain = ask.host
        rid = uuid.uuid4().hex
        admitted = False  # counted against the key's concurrency until a final settle
        held: Exit | None = None  # reserved and not yet settled

        async def settle(outcome: Outcome, final: bool) -> Settled:
            nonlocal admitted, held
            exit, held = held, None
            settled = await self.pool.settle(key, rid, exit, domain, outcome, price, final=final)
            admitted = admitted and not final
            return settled

        banned = 0
        last_error = "no exit was free in time"
        try:
            for attempt in range(self.config.max_attempts):
                reserved = await self._reserve(key, rid, price, exits, ask, deadline, admit=not admitted)
                if isinstance(reserved, web.Response):
                    return reserved
                admitted = True
                if reserved is None:
                    break
                exit = held = reserved
                left = deadline - time.monotonic()
                budget = left / (self.config.max_attempts - attempt)
                sent = time.monotonic()
                try:
                    status, headers, body = await self._via(exit, ask, pinned, budget)
                except ProxyFailed as exc:
                    self.metrics.requests.labels(exit.id, "proxy_failed").inc()
                    last_error = f"exit {exit.id} failed: {exc}"
                    self._cooled(exit, domain, "proxy", await settle("failed", final=False))
                    continue
                except FetchError as exc:
                    self.metrics.requests.labels(exit.id, "target_error").inc()
                    await settle("none", final=True)
                    kind = "too_large" if isinstance(exc, TooLarge) else "bad_response"
                    return self._target_error(kind, str(exc), started, exc.status_code)
                finally:
                    self.metrics.latency.labels(exit.id).observe(time.monotonic() - sent)
                reason = self._ban_reason(domain, status, headers, body)
                if reason is not None:
                    self.metrics.requests.labels(exit.id, "banned").inc()
                    banned += 1
                    last_error = f"banned through exit {exit.id} ({reason})"
                    self._cooled(exit, domain, reason, await settle("banned", final=False))
                    continue
                self.metrics.requests.labels(exit.id, "answered").inc()
                final_url = None
                media = next((v for k, v in headers if k.lower() == "content-type"), "text/html")
                if (
                    how is not None
                    and status == 200
                    and body
                    and media.split(";")[0].strip().lower() in HTML_TYPES
                ):
                    try:  # the exit stays reserved while the page's own requests go through it
                        rendered = await self._render(ask, how, exit, headers, body, deadline)
                    except RenderFailed as exc:
                        await settle("none", final=True)
                        return self._target_error(exc.kind, str(exc), started)
                    body, final_url = rendered.html.encode("utf-8"), rendered.final_url
                await settle("answered", final=True)
                self.metrics.credits.labels(key.id).inc(price)
                return self._envelope(ask, status, headers, body, price, exit, started, final_url)
        finally:
            if admitted or held is not None:
                await settle("none", final=True)
        if time.monotonic() >= deadline and not banned:
            return self._target_error("timeout", f"no answer within {ask.timeout:g}s ({last_error})", started)
        response = _error(503, f"{last_error}; tried {self.config.max_attempts} exit(s), not charged")
        response.headers["Retry-After"] = "1"
        return response

    async def _render(
        self,
        ask: Ask,
        how: RenderAsk,
        exit: Exit,
        headers: list[tuple[str, str]],
        body: bytes,
        deadline: float,
    ) -> Rendered:
        """The page's DOM after its scripts ran (crawler/gateway/render/), through the same exit."""
        assert self.renderer is not None
        document = Document(ask.url, 200, headers, body, self._proxies[exit.id])
        return await self.renderer.render(document, how, ask.session, self._guard, deadline)

    async def _reserve(
        self,
        key: ApiKey,
        rid: str,
        price: float,
        exits: list[Exit],
        ask: Ask,
        deadline: float,
        *,
        admit: bool,
    ) -> Exit | web.Response | None:
        """An exit reserved for the request, waiting (within the deadline and max_wait) for one to
        free up; None if none did; with `admit`, the key's 402 or 429 if it is refused."""
        give_up = min(deadline, time.monotonic() + self.config.max_wait)
        while True:
            got = await self.pool.reserve(
                key, rid, price, exits, ask.host, ask.session, ask.timeout, admit=admit
            )
            if got.refused == "budget":
                return _error(402, f"budget of key {key.id} is spent ({key.budget:g} credits)")
            if got.refused == "concurrency":
                return _error(429, f"key {key.id} is at its concurrency limit ({key.max_concurrency})")
            if got.exit is not None:
                return got.exit
            admit = False
            if got.wait < 0:
                return None  # every candidate is dead
            pause = min(got.wait, give_up - time.monotonic())
            if pause <= 0:
                return None
            await asyncio.sleep(pause)

    def _cooled(self, exit: Exit, domain: str, reason: str, settled: Settled) -> None:
        self.metrics.bans.labels(exit.id, reason).inc()
        self.metrics.cooldowns.labels(exit.id).inc(settled.cooldown)
        log.info("exit %s cools down for %s: %.1fs (%s)", exit.id, domain, settled.cooldown, reason)
        if settled.died:
            log.warning("exit %s marked dead after repeated proxy failures", exit.id)

    def _ban_reason(
        self, domain: str, status: int, headers: list[tuple[str, str]], body: bytes
    ) -> str | None:
        """Why an answer is a ban (status, block marker, empty 200), or None if it counts."""
        if status in self.config.ban_statuses:
            return f"status_{status}"
        if status == 200 and not body:
            media = next((v for k, v in headers if k.lower() == "content-type"), "text/html")
            if media.split(";")[0].strip().lower() in HTML_TYPES:
                return "empty"
        marker = self.config.marker(domain)
        if marker is not None and body and marker.search(body[:200_000].decode("utf-8", "replace")):
            return "marker"
        return None

    async def _via(
        self, exit: Exit, ask: Ask, pinned: str | None, budget: float
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One request through `exit`; ProxyFailed if the exit (not the target) failed."""
        parts = urlsplit(ask.url)
        target = ask.url
        headers = {
            "User-Agent": self.config.user_agent,
            "Accept": "text/html,*/*;q=0.5",
            "Accept-Encoding": ACCEPT_ENCODING,
        }
        if pinned is not None:
            host = f"[{pinned}]" if ":" in pinned else pinned
            target = urlunsplit(
                (parts.scheme, f"{host}:{parts.port or 80}", parts.path or "/", parts.query, "")
            )
            headers["Host"] = parts.netloc.rpartition("@")[2]
        try:
            async with asyncio.timeout(budget):
                async with self._session.get(
                    URL(target, encoded=True),
                    proxy=self._proxies[exit.id],
                    headers=headers,
                    allow_redirects=False,
                ) as resp:
                    if resp.status == 407:
                        raise ProxyFailed("proxy authentication required (407): check the exit's credentials")
                    pairs = [(k, v) for k, v in resp.headers.items() if k.lower() not in DROPPED_HEADERS]
                    media = resp.headers.get("Content-Type", "text/html").split(";")[0].strip().lower()
                    if resp.status in REDIRECTS or (ask.html_only and media not in HTML_TYPES):
                        return resp.status, pairs, b""
                    declared = resp.headers.get("Content-Length", "")
                    if declared.isdigit() and int(declared) > ask.max_body_bytes:
                        raise TooLarge(
                            f"Content-Length {declared} exceeds max_body_bytes {ask.max_body_bytes}",
                            status_code=resp.status,
                        )
                    encodings = resp.headers.getall("Content-Encoding", [])
                    body = await read_body(
                        resp.content.iter_any(), encodings, ask.max_body_bytes, resp.status
                    )
                    return resp.status, pairs, body
        except TimeoutError:
            raise ProxyFailed(f"no answer through it within {budget:.1f}s") from None
        except (aiohttp.ClientProxyConnectionError, aiohttp.ClientHttpProxyError) as exc:
            raise ProxyFailed(f"{type(exc).__name__}: {exc}") from None
        except aiohttp.ClientResponseError as exc:
            raise BadResponse(f"malformed response: {exc.message[:200]}", status_code=exc.status) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise ProxyFailed(f"{type(exc).__name__}: {exc}") from None

    def _envelope(
        self,
        ask: Ask,
        status: int,
        headers: list[tuple[str, str]],
        body: bytes,
        credits: float,
        exit: Exit,
        started: float,
        final_url: str | None = None,
    ) -> web.Response:
        try:
            text, encoding = body.decode("utf-8"), "text"
        except UnicodeDecodeError:
            text, encoding = base64.b64encode(body).decode("ascii"), "base64"
        return web.json_response(
            {
                "status_code": status,
                "headers": headers,
                "body": text,
                "body_encoding": encoding,
                "final_url": final_url or ask.url,
                "credits_used": credits,
                "duration_ms": round((time.monotonic() - started) * 1000, 1),
                "exit": exit.id,
                "rendered": final_url is not None,
            }
        )

    def _target_error(
        self, kind: str, message: str, started: float, status: int | None = None
    ) -> web.Response:
        """The target could not be fetched: an envelope (status 200) saying why, charged nothing."""
        return web.json_response(
            {
                "status_code": status,
                "error": {"kind": kind, "message": message[:500]},
                "credits_used": 0,
                "duration_ms": round((time.monotonic() - started) * 1000, 1),
            }
        )

    # -- operations ------------------------------------------------------------------------------

    async def serve_metrics(self, _: web.Request) -> web.Response:
        """Prometheus text format."""
        return web.Response(
            body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(self, _: web.Request) -> web.Response:
        """200 when Redis answers and some exit is alive; 503 saying which is not."""
        try:
            await self._redis.ping()
            dead = await self.pool.dead()
        except Exception as exc:
            return web.json_response({"ok": False, "error": f"redis: {type(exc).__name__}"}, status=503)
        alive = len(self.config.exits) - len(dead)
        body: dict[str, Any] = {
            "ok": alive > 0,
            "exits": len(self.config.exits),
            "dead": [e.id for e in dead],
            "render": self.renderer.pool.health() if self.renderer is not None else None,
        }
        return web.json_response(body, status=200 if alive else 503)

    async def _watch(self) -> None:
        """Reload proxies.yaml on an edit; an invalid edit is refused and the running one stays."""
        while True:
            await asyncio.sleep(RELOAD_POLL)
            try:
                # A stat is a local syscall of microseconds; a thread hand-off a second costs more.
                mtime = os.stat(self._path).st_mtime
            except OSError:
                continue
            if mtime == self._mtime:
                continue
            self._mtime = mtime
            try:
                loaded = load_proxies(self._path, self._env)
            except ConfigError as exc:
                log.error("edit of %s refused, the running configuration stays:\n%s", self._path, exc)
                continue
            self._apply(loaded.config)
            log.info("%s reloaded: %d exits", self._path, len(loaded.config.exits))

    async def _probe(self) -> None:
        """Bring dead exits back: a request through each to probe_url; without one, they come back
        when their dead time ends and the next request tries them."""
        while True:
            await asyncio.sleep(PROBE_EVERY)
            url = self.config.probe_url
            if not url:
                continue
            with contextlib.suppress(Exception):
                for exit in await self.pool.dead():
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(5):
                            async with self._session.get(url, proxy=self._proxies[exit.id]) as resp:
                                if resp.status < 500 and resp.status != 407:
                                    await self.pool.revive(exit)
                                    log.info("exit %s answers again: alive", exit.id)
