"""The router: canonicalise URLs, keep those in scope and unseen, publish them to their domain queue."""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from aio_pika.abc import AbstractExchange

from crawler.config import CrawlConfig, Rules
from crawler.dedup.store import SeenStore
from crawler.errors import BadURL, CrawlerError
from crawler.frontier.exchanges import routing_key
from crawler.frontier.hosts import Discovery, follows, host_key, host_priority
from crawler.frontier.message import CrawlMessage
from crawler.frontier.publisher import MAX_ROUTING_KEY, Outgoing, Publisher
from crawler.frontier.quota import PageQuota
from crawler.frontier.scope import Scope
from crawler.frontier.traps import trap
from crawler.frontier.urls import canonical_link, canonicalise, fingerprint, host_of
from crawler.names import MAX_PRIORITY, TRACE_LOGGER

log = logging.getLogger(__name__)
trace = logging.getLogger(TRACE_LOGGER)


class PublishFailed(CrawlerError):
    """The broker did not confirm some publishes; their URLs were released for routing again."""


def priority_for(url: str, depth: int, rules: Rules) -> int:
    """A URL's message priority: seeds first, then the domain's URL rules, deeper links lower."""
    if depth == 0:
        return MAX_PRIORITY
    target = url.split("/", 3)[3] if url.count("/") >= 3 else ""
    base = next((r.priority for r in rules.priorities if re.search(r.match, "/" + target)), rules.priority)
    # Below the seeds' level whatever a rule says; a level lower per hop, for up to three hops.
    return max(0, min(base, MAX_PRIORITY - 1) - min(depth - 1, 3))


@dataclass(slots=True)
class Routed:
    """What became of a batch of URLs."""

    published: list[str] = field(default_factory=list)
    seen: int = 0
    out_of_scope: int = 0
    too_deep: int = 0
    traps: int = 0
    over_quota: int = 0
    invalid: int = 0
    host_caps: int = 0  # links to discovered hosts a cap of `discover:` refuses
    by_domain: Counter[str] = field(default_factory=Counter)  # published, per configured domain
    unconfirmed: list[bytes] = field(default_factory=list)  # published, left to the caller to confirm

    def counts(self) -> dict[tuple[str, str], int]:
        """The published URLs as changes to their crawl's counts, keyed (domain, "routed")."""
        return {(d, "routed"): n for d, n in self.by_domain.items()}

    def dropped(self) -> dict[str, int]:
        """The URLs not routed, by reason (the label of crawler_links_dropped_total)."""
        return {
            "out_of_scope": self.out_of_scope,
            "too_deep": self.too_deep,
            "traps": self.traps,
            "over_quota": self.over_quota,
            "invalid": self.invalid,
            "host_caps": self.host_caps,
        }


class _Candidate(NamedTuple):  # not a frozen dataclass: one per link, and its __init__ is 3x slower
    url: str
    host: str
    domain: str | None  # a discovered host's is the host itself
    fingerprint: bytes
    discovered: bool = False  # its host is in no listed domain: it goes to the host layout


class Router:
    """Routes URLs into the frontier exchange with the host as routing key."""

    def __init__(
        self,
        config: CrawlConfig,
        exchange: AbstractExchange,
        seen: SeenStore,
        quota: PageQuota,
        *,
        scope: Scope | None = None,
        discovery: Discovery | None = None,
    ) -> None:
        # A Scope shared with the rest of a consumer follows its live configuration edits.
        self.scope = scope or Scope(config)
        self._publisher = Publisher(exchange)
        self._seen = seen
        self._quota = quota
        self._discovery = discovery or Discovery(quota.redis, quota.names)

    @property
    def seen(self) -> SeenStore:
        """The dedup store links are claimed in."""
        return self._seen

    @property
    def config(self) -> CrawlConfig:
        """The configuration routing follows; setting it (a live edit) changes the scope too."""
        return self.scope.config

    @config.setter
    def config(self, config: CrawlConfig) -> None:
        self.scope.config = config

    async def route(
        self,
        urls: Iterable[str],
        *,
        depth: int,
        claimant: bytes,
        base: str | None = None,
        priority: int | None = None,
        via: tuple[str, ...] = (),
        crawl: str | None = None,
        domains: Collection[str] | None = None,
        max_depth: int | None = None,
        confirm: bool = True,
    ) -> Routed:
        """Publish the unseen, in-scope URLs at `depth`; every publish is confirmed before returning.

        `claimant` identifies who discovered them (a page's fingerprint): if that page is redelivered,
        it may publish again what it had claimed but never got confirmed. `via` is the redirect chain
        that led to them (a redirect target is routed like a link). They belong to crawl `crawl`
        (None: the default crawl), whose own dedup store they are claimed in; that crawl's options
        narrow the domains (`domains`) and lower `max_depth`. With `confirm` off, the published URLs'
        claims are left pending for the caller to confirm (`Routed.unconfirmed`), e.g. with others'.
        """
        result = Routed()
        candidates = self._candidates(urls, depth, base, domains, max_depth, result)
        candidates = await self._within_host_caps(candidates, crawl, result)
        candidates = await self._within_quota(candidates, crawl, result)
        seen = self._seen.for_crawl(crawl)
        fresh = await seen.claim(list(candidates), claimant)
        todo = [c for c, new in zip(candidates.values(), fresh, strict=True) if new]
        result.seen = len(candidates) - len(todo)
        outcomes = await self._publish(todo, seen, depth, priority, via, crawl, confirm, result)
        failed = [c for c, o in zip(todo, outcomes, strict=True) if o is not None]
        if trace.isEnabledFor(logging.DEBUG):
            for url in result.published:
                trace.debug("routed %s depth=%d by=%s", url, depth, claimant.hex())
            for c in failed:
                trace.debug("not routed %s by=%s: released", c.url, claimant.hex())
        if failed:
            first = next(o for o in outcomes if o is not None)
            raise PublishFailed(f"{len(failed)} of {len(todo)} publishes were not confirmed ({first!r})")
        return result

    def _candidates(
        self,
        urls: Iterable[str],
        depth: int,
        base: str | None,
        domains: Collection[str] | None,
        max_depth: int | None,
        result: Routed,
    ) -> dict[bytes, _Candidate]:
        """The URLs canonical, in scope, not too deep and no trap, once each; the rest counted in `result`."""
        candidates: dict[bytes, _Candidate] = {}
        dropped = self.config.dropped_params  # a property building a tuple: once per batch
        # A page's links share a few hosts: look each host's domain and rules up once per batch.
        owners: dict[str, tuple[str | None, Rules, bool] | None] = {}
        for raw in urls:
            try:
                url = canonical_link(raw, dropped) if base is None else canonicalise(raw, base, dropped)
            except BadURL:
                result.invalid += 1
                continue
            host = host_of(url)
            if len(host) > MAX_ROUTING_KEY:  # the host is the routing key; DNS names stop at 253
                result.invalid += 1
                continue
            if host not in owners:
                owners[host] = self._owner(url, host)
            owner = owners[host]
            if owner is None:
                result.out_of_scope += 1
                continue
            domain, rules, discovered = owner
            if domains is not None and domain not in domains:
                result.out_of_scope += 1
                continue
            if depth > rules.max_depth or (max_depth is not None and depth > max_depth):
                result.too_deep += 1
                continue
            if trap(url, rules) is not None:
                result.traps += 1
                continue
            fp = fingerprint(url)
            if fp not in candidates:
                candidates[fp] = _Candidate(url, host, domain, fp, discovered)
        return candidates

    async def _within_host_caps(
        self, candidates: dict[bytes, _Candidate], crawl: str | None, result: Routed
    ) -> dict[bytes, _Candidate]:
        """The candidates not on a discovered host the crawl's host caps refuse; the others counted."""
        # In the order the links came: when a cap is reached, the first hosts of a page are admitted.
        hosts = list(dict.fromkeys(c.host for c in candidates.values() if c.discovered))
        if not hosts:
            return candidates
        admitted = await self._discovery.admit(self.config, hosts, crawl)
        if len(admitted) == len(hosts):
            return candidates
        kept = {fp: c for fp, c in candidates.items() if not c.discovered or c.host in admitted}
        result.host_caps = len(candidates) - len(kept)
        return kept

    async def _within_quota(
        self, candidates: dict[bytes, _Candidate], crawl: str | None, result: Routed
    ) -> dict[bytes, _Candidate]:
        """The candidates whose domain's page quota is not full; the others counted in `result`."""
        # Limits of this batch's domains only: a crawl may configure a thousand.
        chosen = {c.domain for c in candidates.values() if c.domain}
        full = await self._quota.full(chosen, {d: self.config.rules_for(d).max_pages for d in chosen}, crawl)
        if not full:
            return candidates
        kept = {fp: c for fp, c in candidates.items() if c.domain not in full}
        result.over_quota = len(candidates) - len(kept)
        return kept

    async def _publish(
        self,
        todo: list[_Candidate],
        seen: SeenStore,
        depth: int,
        priority: int | None,
        via: tuple[str, ...],
        crawl: str | None,
        confirm: bool,
        result: Routed,
    ) -> list[BaseException | None]:
        """Publish the claimed candidates and settle their claims: confirmed (or left to the caller in
        `result.unconfirmed`) if published, released if not; each publish's outcome (None: confirmed)."""
        # Claimed here and not known to be published: released whatever ends this call, a
        # cancellation included, or they would stay claimed with no message to crawl them.
        unsettled = [c.fingerprint for c in todo]
        outcomes: list[BaseException | None]
        try:
            try:
                outcomes = await self._publisher.publish(
                    [self._message(c, depth, priority, via, crawl) for c in todo]
                )
            except Exception as exc:  # nothing was sent (e.g. the channel is closed)
                outcomes = [exc] * len(todo)
            done = [c for c, o in zip(todo, outcomes, strict=True) if o is None]
            unsettled = [c.fingerprint for c, o in zip(todo, outcomes, strict=True) if o is not None]
            if confirm:
                await seen.confirm([c.fingerprint for c in done])
            else:
                result.unconfirmed = [c.fingerprint for c in done]
        finally:
            if unsettled:
                # Shielded: a second cancellation must not cut the release short.
                await asyncio.shield(seen.release(unsettled))
        result.published = [c.url for c in done]
        result.by_domain.update(c.domain for c in done if c.domain)
        return outcomes

    def _owner(self, url: str, host: str) -> tuple[str | None, Rules, bool] | None:
        """The domain and rules of the host of `url`, and whether it is a discovered host (its domain
        the host itself); None if it is out of scope."""
        if self.config.discovered(host):
            if not follows(self.config, host):
                return None
            return host, self.config.rules_for(host), True
        try:
            domain = self.scope.domain(url, host)
        except BadURL:
            return None
        return domain, self.config.rules_for(domain), False

    def _message(
        self, c: _Candidate, depth: int, priority: int | None, via: tuple[str, ...], crawl: str | None
    ) -> Outgoing:
        body = CrawlMessage(c.url, depth, via, crawl).encode()
        if c.domain and self.config.in_layout(c.domain):
            level = host_priority(depth) if priority is None else priority
            return Outgoing(host_key(c.domain, self.config.discover.shards), body, level)
        if priority is None:
            priority = priority_for(c.url, depth, self.config.rules_for(c.domain))
        return Outgoing(routing_key(c.host, priority), body, priority)
