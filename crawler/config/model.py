"""The whole of domains.yaml as one validated model: the crawl's own settings, each domain's rules
over the defaults, the dedup store, the frontier's queues, the webhooks."""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from functools import cached_property
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, PrivateAttr, ValidationError, field_validator, model_validator

from crawler.config.checks import Strict, nested_pair, valid_domain
from crawler.config.rules import CONTENT_SECONDS, DomainRules, Rules
from crawler.hosts.shown import shown
from crawler.openweb import Discover, DnsConfig, PerIp


class DedupConfig(Strict):
    """How the seen URLs are kept in Redis (crawler/dedup.py); read once, when a process starts."""

    mode: Literal["plain", "compact", "bloom"] = "plain"
    # URLs the crawl is planned for: sizes the Bloom bitmap and the compact bucket count. More still
    # works: compact then grows less compact, Bloom's false-positive rate rises.
    capacity: int = Field(10_000_000, ge=1_000, le=1_000_000_000)
    error_rate: float = Field(0.001, ge=1e-6, le=0.1)  # Bloom's false-positive rate at `capacity`
    buckets: int | None = Field(None, ge=2, le=100_000_000)  # compact; None: capacity / 256


class FrontierConfig(Strict):
    """The kind of RabbitMQ queues the frontier is made of; read when the topology is declared."""

    # classic: one node's queues, ten priority levels. quorum: replicated over `replicas` nodes of a
    # cluster (Raft), surviving the loss of a minority of them; priorities in two bands.
    queue_type: Literal["classic", "quorum"] = "classic"
    replicas: int = Field(3, ge=1, le=9)
    # A quorum queue dead-letters a message returned this many times (a worker dying on it, say)
    # instead of delivering it for ever; shutdowns and reconnects return messages too, so keep room.
    delivery_limit: int = Field(20, ge=2, le=1_000)
    # The line past which a domains file's domains share the host layout's shard queues instead of a
    # queue each: the broker declares about 300 queues a second and keeps a channel per queue per
    # consumer (docs/open-web.md measures it).
    max_domain_queues: int = Field(1_000, ge=1, le=100_000)


class DomainsFile(Strict):
    """`domains_file:`: domains one a line (crawler/hosts/listing.py), for lists too long for
    domains.yaml, all with the rules of `template` over the defaults."""

    path: str = Field(min_length=1)  # relative to domains.yaml's folder
    template: DomainRules = Field(default_factory=DomainRules)

    @model_validator(mode="before")
    @classmethod
    def _path_alone(cls, value: Any) -> Any:
        return {"path": value} if isinstance(value, str) else value


# A page's versions (crawler/sink/versions.py): `reparse` is one `crawler reparse` made.
VersionKind = Literal["new", "changed", "gone", "back", "reparse"]
VERSION_KINDS: tuple[VersionKind, ...] = ("new", "changed", "gone", "back")  # a webhook's by default


def _webhook_url(value: str) -> str:
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or len(value) > 2_048:
        raise ValueError(f"{value[:200]!r} is not an absolute http(s) URL of at most 2048 characters")
    if parts.username or parts.password:
        raise ValueError("put no credentials in a webhook's URL: the signature says who sent it")
    return value.strip()


class Webhook(Strict):
    """A receiver of the change feed (crawler/webhooks/): every version of `kinds` in `domains`
    (none listed: every domain) POSTed as JSON, signed with `secret`, retried after `retry_delays`."""

    url: Annotated[str, AfterValidator(_webhook_url)]
    secret: str = Field(min_length=16, max_length=512, repr=False)
    kinds: tuple[VersionKind, ...] = Field(VERSION_KINDS, min_length=1)
    domains: tuple[str, ...] = ()
    # None: the defaults' retry_delays. Then the version is a dead letter, replayed by `crawler dead`.
    retry_delays: tuple[Annotated[float, Field(gt=0, le=86_400)], ...] | None = Field(None, min_length=1)
    timeout: float = Field(10.0, gt=0, le=300)

    @field_validator("domains")
    @classmethod
    def _domains(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(valid_domain(d) for d in value)

    def wants(self, domain: str, kind: str) -> bool:
        """True if this receiver takes versions of `kind` in `domain`."""
        return kind in self.kinds and (not self.domains or domain in self.domains)

    @cached_property
    def key(self) -> str:
        """Who this receiver is in messages: a digest of its URL, which may hold a token of its own."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]

    @property
    def host(self) -> str:
        """Its host and port: how logs, dead letters and metrics name it."""
        return urlsplit(self.url).netloc


class CrawlConfig(Strict):
    """The whole of domains.yaml."""

    defaults: Rules = Field(default_factory=Rules)
    resolve: dict[str, str] = Field(default_factory=dict)
    allow_private_networks: bool = False
    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    follow_other_domains: bool = False
    tracking_params: tuple[str, ...] = ()
    session_params: tuple[str, ...] = (
        "jsessionid",
        "phpsessid",
        "aspsessionid",
        "sessionid",
        "session_id",
        "sid",
        "cfid",
        "cftoken",
    )
    user_agent: str = Field("crawler/0.1 (+https://github.com/crawler/crawler)", min_length=1)
    max_retry_after: float = Field(300.0, gt=0, le=86_400)
    # RabbitMQ's consumer_timeout (30 min by default): a delivery not acked by then closes its
    # channel and is delivered again, so no fetch may start that could not end before it.
    delivery_timeout: float = Field(1800.0, ge=1, le=7 * 86_400)
    fetcher: Literal["aiohttp", "httpx"] = "aiohttp"
    # The conventions `fetch: api` speaks: our envelope (crawler-gateway) or a paid provider's.
    api_profile: Literal["envelope", "scrapingbee"] = "envelope"
    # How long a domain rests after the fetch service says its budget is spent (402) before its
    # queue is taken up again: time for a person to raise the budget.
    budget_pause: float = Field(300.0, gt=0, le=86_400)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    frontier: FrontierConfig = Field(default_factory=FrontierConfig)
    # A WARC file is closed and the next begun once it holds this many bytes (Heritrix's and
    # Browsertrix's default: 1 GB).
    archive_max_bytes: int = Field(1_000_000_000, ge=1_000, le=100_000_000_000)
    archive_prefix: str = Field("crawler", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.]{0,39}$")
    domains: dict[str, DomainRules] = Field(default_factory=dict)
    # More listed domains, read by crawler/config/loading.py: below frontier.max_domain_queues they
    # join `domains`, above it they are served by the host layout (`layout_domains`).
    domains_file: DomainsFile | None = None
    # Receivers of the change feed as signed HTTP POSTs (docs/outputs.md).
    webhooks: tuple[Webhook, ...] = ()
    # Hosts found by links beyond the listed domains (docs/open-web.md).
    discover: Discover = Field(default_factory=Discover)
    dns: DnsConfig = Field(default_factory=DnsConfig)
    per_ip: PerIp | None = None
    _layout: frozenset[str] = PrivateAttr(default_factory=frozenset)

    @field_validator("resolve")
    @classmethod
    def _resolve_to_ips(cls, value: dict[str, str]) -> dict[str, str]:
        out = {}
        for host, ip in value.items():
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"{host!r}: {ip!r} is not an IP address") from None
            out[valid_domain(host)] = ip
        return out

    @field_validator("allow_networks", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            return value
        out = []
        for item in value:
            try:
                out.append(ipaddress.ip_network(str(item)))
            except ValueError as exc:
                raise ValueError(
                    f"{item!r} is not a network ({exc}); write e.g. 10.1.0.0/16, 127.0.0.21 or fd00::/8"
                ) from None
        return tuple(out)

    @field_validator("user_agent")
    @classmethod
    def _header_value(cls, value: str) -> str:
        # It becomes a request header: a control character would split or corrupt the request.
        if any(ord(c) < 32 or ord(c) == 127 for c in value) or not value.isascii():
            raise ValueError("must be printable ASCII on one line")
        return value

    @field_validator("domains", mode="before")
    @classmethod
    def _normalise_domains(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            return value
        out: dict[str, Any] = {}
        for name, rules in value.items():
            domain = valid_domain(str(name))
            if domain in out:
                raise ValueError(f"{name!r} is listed twice")
            out[domain] = {} if rules is None else rules
        return out

    @model_validator(mode="after")
    def _no_nested_domains(self) -> CrawlConfig:
        # A host routes to exactly one queue; nested domains would bind it to two.
        pair = nested_pair(self.domains)
        if pair is not None:
            raise ValueError(
                f"domains: {pair[0]!r} lies inside {pair[1]!r}; a host must belong to one "
                "domain, so list only one of them"
            )
        return self

    @model_validator(mode="after")
    def _host_template_valid(self) -> CrawlConfig:
        try:
            self.host_rules  # noqa: B018 - built once here, so a bad template is refused at load
        except ValidationError as exc:
            wrong = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"discover.host: {wrong}") from None
        return self

    @model_validator(mode="after")
    def _webhooks_known(self) -> CrawlConfig:
        seen: set[str] = set()
        for i, hook in enumerate(self.webhooks):
            if hook.url in seen:
                raise ValueError(f"webhooks.{i}: {hook.url} is listed twice (a receiver is known by its URL)")
            seen.add(hook.url)
            # With a domains file, once it is read (crawler/config/loading.py): it may list them.
            unknown = self.webhook_strangers(i) if self.domains_file is None else None
            if unknown:
                raise ValueError(unknown)
            self._webhook_address(i, hook)
        return self

    def webhook_strangers(self, i: int) -> str | None:
        """What is wrong with webhook `i`'s `domains:` if it names a domain not listed; else None."""
        hook = self.webhooks[i]
        unknown = [d for d in hook.domains if d not in self.domains and d not in self._layout]
        if not unknown:
            return None
        where = "under `domains:` or in the domains file" if self.domains_file else "under `domains:`"
        return f"webhooks.{i}.domains: not configured {where}: {shown(unknown)}"

    def _webhook_address(self, i: int, hook: Webhook) -> None:
        # A literal address is judged now; a name, when each delivery resolves it.
        try:
            ip = ipaddress.ip_address((urlsplit(hook.url).hostname or "").strip("[]"))
        except ValueError:
            return
        listed = any(ip in net for net in self.allow_networks)
        if not (self.allow_private_networks or listed or ip.is_global):
            raise ValueError(
                f"webhooks.{i}.url: {ip} is not a public address; webhooks are sent only to public "
                "addresses unless allow_private_networks is true or allow_networks lists it"
            )

    @model_validator(mode="after")
    def _fetches_fit_the_delivery_timeout(self) -> CrawlConfig:
        room = self.delivery_timeout - self.delivery_margin
        for where, rules in [
            ("defaults", self.defaults),
            *((f"domains.{d}", r) for d, r in self.rules.items()),
            *((("domains_file.template", self.file_rules),) if self.domains_file is not None else ()),
        ]:
            if rules.visit_seconds >= room:
                content = f" and its content's {CONTENT_SECONDS:g}s" if rules.content is not None else ""
                raise ValueError(
                    f"{where}: timeout {rules.timeout:g}s{content} does not fit in delivery_timeout "
                    f"{self.delivery_timeout:g}s (RabbitMQ's consumer_timeout) less "
                    f"{self.delivery_margin:g}s kept for storing and routing: lower timeout, or raise "
                    "consumer_timeout on the broker and delivery_timeout here together"
                )
        return self

    @property
    def delivery_margin(self) -> float:
        """Seconds of a delivery's time kept for storing and routing after its fetch."""
        return min(30.0, self.delivery_timeout / 10)

    def start_by(self, received: float, rules: Rules) -> float:
        """The latest (monotonic) time a fetch of a delivery `received` then may start."""
        return received + self.delivery_timeout - self.delivery_margin - rules.visit_seconds

    @cached_property
    def rules(self) -> dict[str, Rules]:
        """Each domain's effective rules: its own settings over the defaults."""
        # A domains file's domains share one template: merged once, not once each.
        merged: dict[int, Rules] = {}
        out = {}
        for domain, overrides in self.domains.items():
            found = merged.get(id(overrides))
            if found is None:
                found = merged[id(overrides)] = self._merged(overrides)
            out[domain] = found
        return out

    def _merged(self, overrides: DomainRules) -> Rules:
        merged = {**self.defaults.model_dump(), **overrides.model_dump(exclude_none=True)}
        if "recrawl" in overrides.model_fields_set and overrides.recrawl is None:
            # `recrawl: null` turns the defaults' off (their rules too, unless it has its own),
            # where an unset key takes them.
            merged["recrawl"] = None
            if overrides.recrawl_rules is None:
                merged["recrawl_rules"] = ()
        if "history" in overrides.model_fields_set and overrides.history is None:
            merged["history"] = None
        for key in ("content", "near_duplicates"):  # `off` for this domain, whatever the defaults say
            if key in overrides.model_fields_set and getattr(overrides, key) is None:
                merged[key] = None
        # A domain's `expect:` replaces the defaults' whole: kept as the model it is, since dumped and
        # validated again a page rule's unset `schema` would read as set.
        merged["expect"] = overrides.expect if overrides.expect is not None else self.defaults.expect
        return Rules.model_validate(merged)

    def with_layout(self, domains: frozenset[str]) -> CrawlConfig:
        """This configuration with `domains` listed too, served by the host layout."""
        config = self.model_copy()
        config._layout = domains
        return config

    @property
    def layout_domains(self) -> frozenset[str]:
        """Listed domains (a domains file's, past the line) served by the host layout's shards."""
        return self._layout

    def in_layout(self, domain: str) -> bool:
        """Whether `domain`'s URLs go to the host layout's shards: a discovered host, or a listed
        domain past the line."""
        return domain in self._layout or self.discovered(domain)

    @property
    def layout_kinds(self) -> tuple[Rules, ...]:
        """The rules of the host layout's kinds of domain: a domains file's past the line,
        discovered hosts."""
        kinds = []
        if self._layout:
            kinds.append(self.file_rules)
        if self.discover.follow == "all":
            kinds.append(self.host_rules)
        return tuple(kinds)

    @property
    def layout_recrawls(self) -> tuple[Rules, ...]:
        """The rules of the host layout's kinds of domain whose pages recrawl: a domains file's past
        the line, discovered hosts; none if neither recrawls."""
        return tuple(kind for kind in self.layout_kinds if kind.recrawls)

    @property
    def host_layout(self) -> bool:
        """Whether the host layout's shard queues are in use."""
        return self.discover.follow == "all" or bool(self._layout)

    def domain_of(self, host: str) -> str | None:
        """The configured domain that owns `host` (itself or a parent), or None."""
        host = host.lower().rstrip(".")
        while True:
            if host in self.domains or host in self._layout:
                return host
            _, dot, host = host.partition(".")
            if not dot:
                return None

    def rules_for(self, domain: str | None) -> Rules:
        """Rules of a configured domain, the host template's for a discovered host (`discover:
        follow: all`), or the defaults for any other host."""
        if not domain:
            return self.defaults
        found = self.rules.get(domain)
        if found is not None:
            return found
        if domain in self._layout:
            return self.file_rules
        return self.host_rules if self.discover.follow == "all" else self.defaults

    @cached_property
    def file_rules(self) -> Rules:
        """What a domains file's domain gets: the defaults with the file's `template` over them."""
        template = self.domains_file.template if self.domains_file is not None else DomainRules()
        return self._merged(template)

    @cached_property
    def host_rules(self) -> Rules:
        """What a discovered host gets: the defaults with the `discover.host` template over them."""
        host = self.discover.host
        template = host.model_dump(include={"rate", "burst", "max_pages", "max_depth"})
        for key in ("recrawl", "sitemaps"):
            if key in host.model_fields_set:
                template[key] = getattr(host, key)
        return self._merged(DomainRules.model_validate(template))

    def discovered(self, host: str) -> bool:
        """Whether `host` is crawled as a discovered host: no listed domain covers it and discovery
        follows links to such hosts (its scope decides which; crawler/frontier/hosts.py)."""
        return self.discover.follow == "all" and self.domain_of(host) is None

    @property
    def content(self) -> bool:
        """True if any domain makes content of its pages: a worker then starts a content pool."""
        return any(rules.content is not None for rules in self.rules.values())

    @property
    def dropped_params(self) -> tuple[str, ...]:
        """Query parameters canonicalisation drops besides the built-in tracking ones."""
        return (*self.tracking_params, *self.session_params)

    @property
    def retry_tiers(self) -> tuple[float, ...]:
        """Every distinct retry delay of any domain, ascending: one delay queue each."""
        delays = {*self.defaults.retry_delays, self.max_retry_after}
        for rules in self.rules.values():
            delays.update(rules.retry_delays)
        for hook in self.webhooks:
            delays.update(hook.retry_delays or ())
        return tuple(sorted(delays))
