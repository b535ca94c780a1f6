"""crawler-gateway's HTTP service: GET /fetch (the target's answer, raw or as the JSON envelope),
/metrics and /healthz (what they say of API keys only to a caller with the metrics token).

Each request: the key (constant-time), the private-network guard on the target, then up to
max_attempts exits from the pool (attempts.py), the first reservation also checking the key's budget
and concurrency. Only an answer that counts is charged. All state lives in Redis (two script calls a
request when nothing goes wrong), so replicas behind one address act as one gateway. Each replica
publishes its exits' and keys' state for the console while it runs (report.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import os
from collections.abc import Iterator, Mapping
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from redis.asyncio import Redis

from crawler.errors import ConfigError
from crawler.gateway import forms
from crawler.gateway.answer import BAD_REQUEST, KEY, GatewayAnswer, Refusal
from crawler.gateway.ask import parse_ask
from crawler.gateway.attempts import Attempts
from crawler.gateway.ledger import find_key
from crawler.gateway.metrics import GatewayMetrics
from crawler.gateway.pool import Pool
from crawler.gateway.proxies import ProxiesConfig, load_proxies
from crawler.gateway.relay import Relay
from crawler.gateway.render import Renderer
from crawler.gateway.report import Reporter
from crawler.gateway.setup import Setup
from crawler.monitor.liveness import BEATS_PER_TTL
from crawler.names import GW_REPLICA_TTL, Names
from crawler.stopping import still_cancelled

log = logging.getLogger("crawler.gateway")

RELOAD_POLL = 1.0
PROBE_EVERY = 5.0


class Gateway:
    """The gateway of one process; its state is Redis's, its config proxies.yaml's (reloaded live)."""

    def __init__(self, redis: Redis, names: Names, path: str, env: Mapping[str, str] | None = None) -> None:
        self._redis = redis
        self._path = path
        self._env = os.environ if env is None else env
        loaded = load_proxies(path, self._env)
        self._mtime = loaded.mtime
        self.setup = Setup.of(loaded.config, self._env)
        self.metrics = GatewayMetrics()
        self.pool = Pool(redis, names, loaded.config)
        # ca_file is read at start, as render: is; an edit of either takes effect at a restart.
        ca_file = loaded.config.ca_file
        self._relay = Relay(ca_file)
        render = loaded.config.render
        self.renderer = (
            Renderer(render, self.metrics.registry, loaded.config.user_agent, ca_file) if render else None
        )
        self._attempts = Attempts(self.pool, self._relay, self.renderer, self.metrics)
        self.reporter = Reporter(redis, names, lambda: self.config)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def config(self) -> ProxiesConfig:
        """The proxies.yaml in force."""
        return self.setup.config

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
            try:
                await self.renderer.start()
            except BaseException:  # a browser that cannot start: nothing is left open
                await self._relay.close()
                raise
        try:  # entered before its first request; a replica never entered counts as alive
            await self.pool.beat()
        except Exception as exc:  # Redis is not there yet: its requests fail until it is, and _beat enters it
            log.warning("cannot enter this replica in Redis's set of replicas (%s): trying again", exc)
        self._tasks = [
            asyncio.create_task(self._beat()),
            asyncio.create_task(self._watch()),
            asyncio.create_task(self._probe()),
            asyncio.create_task(self.reporter.run()),
        ]

    async def _stop(self, _: web.Application) -> None:
        # The reporter removes this replica's report as it ends: a clean stop is not a silent one.
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):  # Redis gone: the entry lapses by itself
            await self.pool.leave()
        await self._relay.close()
        if self.renderer is not None:
            await self.renderer.close()

    async def fetch(self, request: web.Request) -> web.StreamResponse:
        """GET /fetch?url=…: the target's answer through a pool exit, in the form asked for."""
        with self.metrics.inflight.track_inprogress():
            outcome, form = await self._outcome(request)
            try:
                response = await form(outcome, request)
            finally:
                await outcome.close()
        self.metrics.answers.labels(str(outcome.code)).inc()
        return response

    async def _outcome(self, request: web.Request) -> tuple[GatewayAnswer, forms.Form]:
        """What to answer, and the form to answer in; the gateway's refusals are alike in both."""
        setup = self.setup
        key = find_key(setup.keys, request.headers.get("X-API-Key", ""))
        if key is None:
            return Refusal(401, KEY, "missing or unknown API key (X-API-Key)"), forms.envelope
        try:
            ask = parse_ask(request.query)
        except ValueError as exc:
            return Refusal(400, BAD_REQUEST, str(exc)), forms.envelope
        form = forms.envelope if ask.envelope else forms.raw
        if ask.render is not None and self.renderer is None:
            message = "render_js=true: this gateway has no renderer (add `render:` to its proxies.yaml)"
            return Refusal(400, BAD_REQUEST, message), form
        exits = self.pool.candidates(ask.country, ask.premium)
        if not exits:
            tier = "premium" if ask.premium else "datacenter"
            message = f"no {tier} exit in country {ask.country or 'any'} in proxies.yaml"
            return Refusal(400, BAD_REQUEST, message), form
        price = setup.config.prices.price(ask.render is not None, ask.premium)
        return await self._attempts.run(setup, ask, key, exits, price), form

    # -- operations ------------------------------------------------------------------------------

    def _operator(self, request: web.Request) -> bool:
        """Whether `request` carries the metrics token (Authorization: Bearer), compared in constant time."""
        token = self.setup.metrics_token
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        return token is not None and hmac.compare_digest(token.encode(), given.encode())

    async def serve_metrics(self, request: web.Request) -> web.Response:
        """Prometheus text format; the series labelled by API key only with the metrics token."""
        registry = self.metrics.registry
        body = generate_latest(registry if self._operator(request) else _Keyless(registry))
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        """200 when Redis answers and some exit is alive; 503 saying which is not. What the renderer
        is doing (renders in flight, the keys' sessions) only with the metrics token."""
        try:
            await self._redis.ping()
            dead = await self.pool.dead()
        except Exception as exc:
            return web.json_response({"ok": False, "error": f"redis: {type(exc).__name__}"}, status=503)
        exits = self.setup.config.exits
        alive = len(exits) - len(dead)
        render: dict[str, int] | None = None
        if self.renderer is not None:
            render = self.renderer.pool.health()
            if not self._operator(request):
                render = {k: v for k, v in render.items() if k in ("browsers", "contexts")}
        body: dict[str, Any] = {
            "ok": alive > 0,
            "exits": len(exits),
            "dead": [e.id for e in dead],
            "render": render,
        }
        return web.json_response(body, status=200 if alive else 503)

    async def _beat(self) -> None:
        """Renew this replica's entry in the fleet's set; a failed renewal is tried at the next beat."""
        while True:
            await asyncio.sleep(GW_REPLICA_TTL / BEATS_PER_TTL)
            try:
                await self.pool.beat()
            except Exception as exc:
                still_cancelled()
                log.warning("cannot renew this replica's entry in Redis (%s): trying again", exc)

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
            self.setup = Setup.of(loaded.config, self._env)
            self.pool.config = loaded.config
            log.info("%s reloaded: %d exits", self._path, len(loaded.config.exits))

    async def _probe(self) -> None:
        """Bring dead exits back: a request through each to probe_url; without one, they come back
        when their dead time ends and the next request tries them."""
        while True:
            await asyncio.sleep(PROBE_EVERY)
            setup = self.setup
            url = setup.config.probe_url
            if not url:
                continue
            with contextlib.suppress(Exception):
                for exit in await self.pool.dead():
                    with contextlib.suppress(Exception):
                        async with asyncio.timeout(5):
                            proxy = setup.proxies[exit.id]
                            tls = url.startswith("https:")
                            get = self._relay.session.get(url, **proxy.options({}, tls))
                            async with get as resp:
                                if resp.status < 500 and resp.status != 407:
                                    await self.pool.revive(exit)
                                    log.info("exit %s answers again: alive", exit.id)


class _Keyless:
    """A registry's metrics without the series labelled by API key (ids and credits): what /metrics
    shows a caller without the metrics token."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        """Each metric, its keyed samples left out."""
        for metric in self._registry.collect():
            samples = [s for s in metric.samples if "key" not in s.labels]
            if samples or not metric.samples:
                metric.samples = samples
                yield metric
