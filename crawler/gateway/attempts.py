"""A request tried through up to max_attempts exits: a ban cools that (exit, domain) pair down and
the next attempt takes another exit; only an answer that counts (the target answered, no ban) is
charged; a render_js page is handed to the renderer through the exit that fetched it."""

from __future__ import annotations

import logging
import time

from crawler.errors import FetchError
from crawler.fetch.fetcher import HTML_TYPES
from crawler.gateway.answer import NO_EXIT, Failed, GatewayAnswer, Page, Refusal, explained
from crawler.gateway.ask import Ask
from crawler.gateway.hold import Hold, Streamed
from crawler.gateway.metrics import GatewayMetrics
from crawler.gateway.pinning import cleared
from crawler.gateway.pool import Pool, Settled
from crawler.gateway.proxies import ApiKey, Exit, ProxiesConfig
from crawler.gateway.relay import ProxyFailed, Relay, Reply
from crawler.gateway.render import Document, Renderer, RenderFailed
from crawler.gateway.setup import Setup

log = logging.getLogger("crawler.gateway")
RENDERED_TYPE = "text/html; charset=utf-8"  # a rendered DOM is serialized as UTF-8, whatever the page was
MARKER_SPAN = 200_000  # characters of a body searched for its domain's block marker


class Attempts:
    """Carries requests through the pool's exits, charging the answers that count."""

    def __init__(self, pool: Pool, relay: Relay, renderer: Renderer | None, metrics: GatewayMetrics) -> None:
        self._pool = pool
        self._relay = relay
        self._renderer = renderer
        self._metrics = metrics

    async def run(
        self, setup: Setup, ask: Ask, key: ApiKey, exits: list[Exit], price: float
    ) -> GatewayAnswer:
        """The target's answer to `ask` (charged), its failure, or the gateway's refusal."""
        started = time.monotonic()
        try:
            pinned = await cleared(setup.guard, ask.url)
        except FetchError as exc:
            return Failed.of(exc, started, ask.url)
        hold = Hold(self._pool, key, price, ask.host, self._metrics)
        outcome: GatewayAnswer | None = None
        try:
            outcome = await self._tries(setup, ask, key, hold, exits, pinned, started)
            return outcome
        finally:
            if not (isinstance(outcome, Page) and outcome.rest is not None):
                await hold.close()  # a stream's hold is released when the stream ends

    async def _tries(
        self,
        setup: Setup,
        ask: Ask,
        key: ApiKey,
        hold: Hold,
        exits: list[Exit],
        pinned: str,
        started: float,
    ) -> GatewayAnswer:
        config = setup.config
        deadline = started + ask.timeout
        banned = 0
        tried: list[str] = []  # what each attempt met, for the log: it may name a proxy's address
        for attempt in range(config.max_attempts):
            exit = await hold.reserve(exits, ask, deadline, config.max_wait)
            if isinstance(exit, Refusal):
                return exit
            if exit is None:
                break
            budget = (deadline - time.monotonic()) / (config.max_attempts - attempt)
            sent = time.monotonic()
            try:
                reply = await self._relay.send(setup, exit, ask, pinned, budget)
            except ProxyFailed as exc:
                self._metrics.requests.labels(exit.id, "proxy_failed").inc()
                tried.append(f"exit {exit.id} failed: {exc}")
                self._cooled(exit, ask.host, "proxy", await hold.release("failed", final=False))
                continue
            except FetchError as exc:
                self._metrics.requests.labels(exit.id, "target_error").inc()
                return Failed.of(exc, started, ask.url)
            finally:
                self._metrics.latency.labels(exit.id).observe(time.monotonic() - sent)
            reason = ban_reason(config, ask.host, reply)
            if reason is not None:
                await reply.aclose()
                self._metrics.requests.labels(exit.id, "banned").inc()
                banned += 1
                tried.append(f"banned through exit {exit.id} ({reason})")
                self._cooled(exit, ask.host, reason, await hold.release("banned", final=False))
                continue
            self._metrics.requests.labels(exit.id, "answered").inc()
            return await self._answer(setup, ask, key, hold, exit, reply, started)
        detail = "; ".join(tried) or "no exit was free in time"
        if time.monotonic() >= deadline and not banned:
            text = f"no answer within {ask.timeout:g}s"
            return Failed("timeout", explained(text, detail, ask.url), None, started)
        text = f"no exit could carry the request ({len(tried)} tried), not charged"
        return Refusal(503, NO_EXIT, explained(text, detail, ask.url), retry_after=1)

    async def _answer(
        self, setup: Setup, ask: Ask, key: ApiKey, hold: Hold, exit: Exit, reply: Reply, started: float
    ) -> GatewayAnswer:
        """The answer that counts: rendered if asked, charged now, or once its stream has ended."""
        headers, body, final_url, rendered = reply.headers, reply.head, reply.url, False
        original = None  # the document as the site sent it, kept beside a DOM when asked for
        if ask.render is not None and reply.status == 200 and body and reply.media in HTML_TYPES:
            assert self._renderer is not None
            document = Document(reply.url, 200, headers, body, setup.proxies[exit.id])
            # A session is the key's own: another key naming the same session gets another context.
            session = (key.id, ask.session) if ask.session else None
            try:  # the exit stays reserved while the page's own requests go through it
                dom = await self._renderer.render(
                    document, ask.render, session, setup.guard, started + ask.timeout, ask.max_body_bytes
                )
            except RenderFailed as exc:
                return Failed(exc.kind, explained(str(exc), exc.detail, ask.url), None, started)
            original = body if ask.document else None
            body, final_url, rendered = dom.html.encode("utf-8"), dom.final_url, True
            if len(body) > ask.max_body_bytes:
                text = f"the rendered page exceeds max_body_bytes ({ask.max_body_bytes})"
                return Failed("too_large", explained(text, f"{len(body)} bytes", ask.url), None, started)
            headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
            headers.append(("Content-Type", RENDERED_TYPE))
        rest = None if reply.rest is None else Streamed(reply, hold, started + ask.timeout)
        if rest is None:
            await hold.charge()
        return Page(
            reply.status,
            reply.initial_status,
            headers,
            body,
            rest,
            final_url,
            hold.price,
            exit.id,
            rendered,
            started,
            original,
        )

    def _cooled(self, exit: Exit, domain: str, reason: str, settled: Settled) -> None:
        self._metrics.bans.labels(exit.id, reason).inc()
        self._metrics.cooldowns.labels(exit.id).inc(settled.cooldown)
        log.info("exit %s cools down for %s: %.1fs (%s)", exit.id, domain, settled.cooldown, reason)
        if settled.died:
            log.warning("exit %s marked dead after repeated proxy failures", exit.id)


def ban_reason(config: ProxiesConfig, domain: str, reply: Reply) -> str | None:
    """Why an answer is a ban (status, block marker, empty 200), or None if it counts."""
    if reply.status in config.ban_statuses:
        return f"status_{reply.status}"
    if reply.status == 200 and not reply.head and reply.media in HTML_TYPES:
        return "empty"
    marker = config.marker(domain)
    if (
        marker is not None
        and reply.head
        and marker.search(reply.head[:MARKER_SPAN].decode("utf-8", "replace"))
    ):
        return "marker"
    return None
