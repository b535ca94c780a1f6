"""domains.yaml as one validated model: per-domain crawl rules with inherited defaults."""

from __future__ import annotations

import hashlib
import importlib
import ipaddress
import re
from collections.abc import Callable, Mapping
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from cssselect import HTMLTranslator, SelectorError
from lxml import etree
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails

from crawler.errors import ConfigError
from crawler.openweb import describe
from crawler.quality.expect import Expect, unknown_key

Priority = Annotated[int, Field(ge=0, le=9)]


FieldType = Literal["str", "int", "float", "price", "date", "bool"]
Structured = Literal["json-ld", "opengraph", "microdata"]
_TRANSLATOR = HTMLTranslator()


def css_to_xpath(selector: str) -> str:
    """The XPath of a CSS selector, relative to the node it is evaluated on; ValueError if invalid."""
    try:
        return _TRANSLATOR.css_to_xpath(selector)
    except (SelectorError, TypeError) as exc:
        raise ValueError(f"{selector!r} is not a CSS selector ({exc})") from None


def check_xpath(expression: str) -> str:
    """`expression` if lxml compiles it as XPath; ValueError saying why not."""
    try:
        etree.XPath(expression)
    except etree.XPathSyntaxError as exc:
        raise ValueError(f"{expression!r} is not an XPath expression ({exc})") from None
    return expression


class FieldRule(BaseModel):
    """One `extract` field: where its value is (css or xpath), how to read it, what type it has.

    The short form `title: h1` is `{css: h1}`.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    css: str | None = None
    xpath: str | None = None
    attr: str | None = None  # an attribute's value instead of the text; href/src/... made absolute
    all: bool = False  # every match, as a list
    regex: str | None = None  # the first group (or the whole match) of a search in the value
    type: FieldType = "str"
    format: str | None = None  # strptime format of a `date`, when it is not one we recognise
    default: str | int | float | bool | None = None
    required: bool = False  # a page without it is an extraction failure
    fields: dict[str, FieldRule] | None = None  # a group: these fields, inside each match

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return {"css": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _valid(self) -> FieldRule:
        if (self.css is None) == (self.xpath is None):
            raise ValueError("give exactly one of css or xpath")
        if self.css is not None:
            css_to_xpath(self.css)
        if self.xpath is not None:
            check_xpath(self.xpath)
        if self.regex is not None:
            _check_pattern(self.regex)
        if self.format is not None and self.type != "date":
            raise ValueError("format applies to type: date only")
        if self.fields is not None:
            if self.attr is not None or self.regex is not None or self.type != "str":
                raise ValueError("a group (fields) takes no attr, regex or type: its fields do")
            if not self.fields:
                raise ValueError("fields: a group needs at least one field")
        return self


def _short_forms(value: Any) -> Any:
    # The YAML `extract: {title: h1}` of old: a bare selector string is a CSS field.
    if isinstance(value, Mapping):
        return {name: {"css": rule} if isinstance(rule, str) else rule for name, rule in value.items()}
    return value


Selectors = Annotated[dict[str, FieldRule], BeforeValidator(_short_forms)]


@lru_cache(maxsize=256)
def import_hook(ref: str) -> Callable[..., Any]:
    """The function named by "package.module:function"; ValueError saying why it cannot be had."""
    module_name, colon, attr = ref.partition(":")
    if not colon or not module_name or not attr:
        raise ValueError(f"{ref!r}: write a parse hook as package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own code may raise anything while importing
        raise ValueError(f"{ref!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ValueError(f"{ref!r}: {module_name} has no function {attr}")
    return target  # type: ignore[no-any-return]


def _check_hook(ref: str) -> str:
    import_hook(ref)
    return ref


Hook = Annotated[str, AfterValidator(_check_hook)]


def _check_css(value: str) -> str:
    css_to_xpath(value)
    return value


def _check_pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
    return value


class PriorityRule(BaseModel):
    """URLs whose path and query match `match` (a regular expression) get `priority`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    match: Annotated[str, AfterValidator(_check_pattern)]
    priority: Annotated[int, Field(ge=0, le=9)]


class ParseRule(BaseModel):
    """Pages whose path and query match `match` (a regular expression) go through the hook `parse`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    match: Annotated[str, AfterValidator(_check_pattern)]
    parse: Hook


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FetchSpec(_Strict):
    """How a page is fetched: `direct` from this machine, or `api` through the fetch service.

    Written as `fetch: direct`, `fetch: api` or a mapping with the api options.
    """

    via: Literal["direct", "api"] = "direct"
    country: Annotated[str, Field(pattern=r"^[A-Za-z]{2}$")] | None = None  # the exit's country (ISO)
    premium: bool = False  # premium (residential) exits: dearer
    session: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")] | None = None  # sticky exit id
    render_js: bool = False  # a browser renders the page: dearer still
    # When a rendered page counts as done: the browser's load state, then the selector if set.
    wait_until: Literal["load", "domcontentloaded", "networkidle"] = "load"
    wait_for: Annotated[str, AfterValidator(_check_css)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return {"via": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _api_options(self) -> FetchSpec:
        if self.via == "direct" and (self.country or self.premium or self.session or self.render_js):
            raise ValueError(
                "country, premium, session and render_js need `via: api` (a page is rendered by the "
                "fetch service, crawler-gateway with `render:` in its proxies.yaml, never by a worker)"
            )
        if not self.render_js and (self.wait_until != "load" or self.wait_for):
            raise ValueError("wait_until and wait_for apply to rendered pages only: add `render_js: true`")
        return self


class FetchRule(_Strict):
    """URLs whose path and query match `match` (a regular expression) are fetched as `fetch` says."""

    match: Annotated[str, AfterValidator(_check_pattern)]
    fetch: FetchSpec


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")


def parse_duration(value: Any) -> Any:
    """Seconds from a duration as written: a number (seconds) or 90s, 30m, 6h, 2d, 1w."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return value  # the model says what it wanted
    if isinstance(value, int | float):
        return float(value)
    found = _DURATION.fullmatch(value)
    if found is None:
        raise ValueError(f"{value!r} is not a duration: write e.g. 90s, 30m, 6h, 2d or 1w")
    return float(found[1]) * _UNITS[found[2] or "s"]


Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=366 * 86_400)]
MAX_BACKOFF_RECOVERY = 3_600.0  # seconds: the longest a back-off may take to double back
MIN_EVERY = 3_600.0  # recrawl.min when not given: an hour, or `every` if that is shorter
MAX_EVERY = 30 * 86_400.0  # recrawl.max when not given: 30 days, or `every` if that is longer


def _off(value: Any) -> Any:
    # YAML reads a bare `off` (and `no`) as false: recrawl off, as null says.
    return None if value is False else value


class Recrawl(_Strict):
    """When a stored page is fetched again: `every` at first, then adaptively between `min` and `max`
    (longer while it stays unchanged, shorter once it changes); dropped after `drop_after` gone answers."""

    every: Duration = 86_400.0
    min: Duration | None = None
    max: Duration | None = None
    adaptive: bool = True
    drop_after: int = Field(3, ge=1, le=1_000)

    @model_validator(mode="after")
    def _ordered(self) -> Recrawl:
        if self.lowest > self.every or self.highest < self.every:
            seconds = f"{self.lowest:g}, {self.every:g}, {self.highest:g}"
            raise ValueError(f"need min <= every <= max (in seconds: {seconds})")
        return self

    @property
    def lowest(self) -> float:
        """The shortest interval: `min`, or an hour (`every` if shorter)."""
        return self.min if self.min is not None else min(MIN_EVERY, self.every)

    @property
    def highest(self) -> float:
        """The longest interval: `max`, or 30 days (`every` if longer)."""
        return self.max if self.max is not None else max(MAX_EVERY, self.every)


class History(_Strict):
    """Which versions of a page are kept (crawler/sink/versions.py): the newest `keep` at most, and
    none older than `max_age` but its newest. `crawler history prune` applies it."""

    keep: int = Field(100, ge=1, le=1_000_000)
    max_age: Duration = 365 * 86_400.0


def _sitemaps(value: Any) -> Any:
    # YAML reads a bare `off` (and `no`) as false; `true` or `on` asks for what `auto` does.
    if value is True or value == "on":
        return "auto"
    if value is None or value is False or value == "off":
        return False
    if value == "auto":
        return value
    if not isinstance(value, list | tuple):
        raise ValueError(f"{str(value)[:80]!r}: give auto, false, or a list of sitemap URLs")
    for url in value:
        parts = urlsplit(url.strip()) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or len(url) > 2_048:
            raise ValueError(f"{str(url)[:200]!r} is not an absolute http(s) URL of at most 2048 characters")
    return tuple(url.strip() for url in value)


Sitemaps = Annotated[Literal["auto", False] | tuple[str, ...], BeforeValidator(_sitemaps)]
"""Where a domain's sitemaps are: `auto` (robots.txt's Sitemap lines, else /sitemap.xml), those and
the listed URLs, or none (false)."""


ContentFormat = Literal["markdown", "text"]
# A page's content job in the content pool gets this long (its time limit) before it is refused:
# a delivery keeps room for it after the fetch.
CONTENT_SECONDS = 30.0


def _content(value: Any) -> Any:
    # `content: true` (or `on`) asks for the defaults; a bare `off` (YAML's false) turns it off.
    if value is True or value == "on":
        return {}
    return None if value is False or value == "off" else value


class ContentRules(_Strict):
    """What a page's content becomes (crawler/content/, docs/content.md): with `main`, an HTML
    page's main content in `formats`; documents (PDF, office files) are read into text either way;
    `lang` and `simhash` come with both."""

    main: bool = True
    formats: tuple[ContentFormat, ...] = Field(("markdown", "text"), min_length=1)
    favor: Literal["balanced", "precision", "recall"] = "precision"  # trafilatura's trade-off

    @field_validator("formats")
    @classmethod
    def _once(cls, value: tuple[ContentFormat, ...]) -> tuple[ContentFormat, ...]:
        if len(set(value)) != len(value):
            raise ValueError("list each format once")
        return value


def _near(value: Any) -> Any:
    # `near_duplicates: skip_links` is the short form of `{skip_links: true}`; `on` or true: defaults.
    if value == "skip_links":
        return {"skip_links": True}
    if value is True or value == "on":
        return {}
    return None if value is False or value == "off" else value


class NearDuplicates(_Strict):
    """Near-duplicates of a domain with `content` on: its pages' simhashes claimed in the fleet's index
    (crawler/dedup/near.py) within `distance` bits; with `skip_links`, a near-duplicate's links are
    not followed (mirrors, session-id traps)."""

    distance: int = Field(3, ge=0, le=4)
    skip_links: bool = False


class RecrawlRule(_Strict):
    """URLs whose path and query match `match` (a regular expression) are recrawled with these
    settings over the domain's `recrawl` (or over its defaults, if the domain's is off)."""

    match: Annotated[str, AfterValidator(_check_pattern)]
    every: Duration | None = None
    min: Duration | None = None
    max: Duration | None = None
    adaptive: bool | None = None
    drop_after: int | None = Field(None, ge=1, le=1_000)


class Rules(_Strict):
    """Crawl rules of one domain; every field may be set in `defaults` or per domain."""

    priority: Priority = 5
    prefetch: int = Field(16, ge=1, le=10_000)
    rate: float = Field(5.0, gt=0, le=100_000)
    burst: int = Field(5, ge=1, le=100_000)
    max_depth: int = Field(5, ge=0, le=1_000)
    max_pages: int = Field(10_000, ge=1)
    obey_robots: bool = True
    timeout: float = Field(10.0, gt=0, le=600)
    max_body_bytes: int = Field(5_000_000, ge=1_024, le=1_000_000_000)
    max_redirects: int = Field(10, ge=0, le=50)
    max_links: int = Field(5_000, ge=0, le=1_000_000)
    retry_delays: tuple[Annotated[float, Field(gt=0, le=86_400)], ...] = Field((1.0, 5.0, 30.0), min_length=1)
    backoff_recovery: float = Field(10.0, gt=0, le=MAX_BACKOFF_RECOVERY)
    max_url_length: int = Field(2_048, ge=32, le=2_048)
    max_path_repeats: int = Field(2, ge=1, le=100)
    priorities: tuple[PriorityRule, ...] = ()
    extract: Selectors = Field(default_factory=dict)
    fetch: FetchSpec = Field(default_factory=FetchSpec)
    fetch_rules: tuple[FetchRule, ...] = ()
    max_credits: float | None = Field(None, gt=0)  # fetch-service credits per domain per crawl

    structured: tuple[Structured, ...] = ()
    parse: Hook | None = None
    parsers: tuple[ParseRule, ...] = ()  # per URL; the first match wins over `parse`
    recrawl: Annotated[Recrawl | None, BeforeValidator(_off)] = None  # None: each page once per crawl
    recrawl_rules: tuple[RecrawlRule, ...] = ()  # per URL; the first match wins
    # Versions of each page and the change feed; None (the default, or `history: off`): neither.
    # Off unless asked, as `recrawl` is: a version of every page costs a first crawl ~50 % more CPU.
    history: Annotated[History | None, BeforeValidator(_off)] = None
    sitemaps: Sitemaps = "auto"
    # Every answer this domain gives is written to the WARC archive (crawler/archive/), for
    # `crawler reparse` and for any WARC reader.
    archive: bool = False
    # Main content as Markdown and text, language, documents read, simhash; None (the default, or
    # `content: off`): none of it, and no content pool is started.
    content: Annotated[ContentRules | None, BeforeValidator(_content)] = None
    # Applies with `content` on; `off`: no simhash is claimed.
    near_duplicates: Annotated[NearDuplicates | None, BeforeValidator(_near)] = Field(
        default_factory=NearDuplicates
    )
    # What the extracted data must look like, per domain and per URL rule (docs/quality.md); None:
    # nothing is expected, and each `extract` field's coverage is counted all the same.
    expect: Expect | None = None

    def fetch_for(self, url: str) -> FetchSpec:
        """How `url` is fetched: the first fetch rule found in its path and query, else `fetch`."""
        if self.fetch_rules:
            parts = urlsplit(url)
            target = parts.path + ("?" + parts.query if parts.query else "")
            for rule in self.fetch_rules:
                if re.search(rule.match, target):
                    return rule.fetch
        return self.fetch

    def recrawl_for(self, url: str) -> Recrawl | None:
        """When `url` is fetched again: the first recrawl rule found in its path and query over
        `recrawl`; None if it is not (the domain's recrawl is off and no rule matches)."""
        if self.recrawl_rules:
            parts = urlsplit(url)
            target = parts.path + ("?" + parts.query if parts.query else "")
            for rule in self.recrawl_rules:
                if re.search(rule.match, target):
                    base = (self.recrawl or Recrawl()).model_dump(exclude_none=True)
                    own = rule.model_dump(exclude={"match"}, exclude_none=True)
                    return _recrawl({**base, **own})
        return self.recrawl

    @property
    def recrawls(self) -> bool:
        """True if any of the domain's pages is fetched again on a schedule."""
        return self.recrawl is not None or bool(self.recrawl_rules)

    @property
    def visit_seconds(self) -> float:
        """The longest a page's visit takes once its fetch starts: the fetch, then its content."""
        return self.timeout + (CONTENT_SECONDS if self.content is not None else 0.0)

    @property
    def uses_api(self) -> bool:
        """True if any of the domain's pages may go through the fetch service."""
        return self.fetch.via == "api" or any(r.fetch.via == "api" for r in self.fetch_rules)

    @property
    def renders(self) -> bool:
        """True if any of the domain's pages is to be rendered by the fetch service's browser."""
        return self.fetch.render_js or any(r.fetch.render_js for r in self.fetch_rules)


class DomainRules(_Strict):
    """A domain's overrides; unset fields come from `defaults`."""

    priority: Priority | None = None
    prefetch: int | None = Field(None, ge=1, le=10_000)
    rate: float | None = Field(None, gt=0, le=100_000)
    burst: int | None = Field(None, ge=1, le=100_000)
    max_depth: int | None = Field(None, ge=0, le=1_000)
    max_pages: int | None = Field(None, ge=1)
    obey_robots: bool | None = None
    timeout: float | None = Field(None, gt=0, le=600)
    max_body_bytes: int | None = Field(None, ge=1_024, le=1_000_000_000)
    max_redirects: int | None = Field(None, ge=0, le=50)
    max_links: int | None = Field(None, ge=0, le=1_000_000)
    retry_delays: tuple[Annotated[float, Field(gt=0, le=86_400)], ...] | None = Field(None, min_length=1)
    backoff_recovery: float | None = Field(None, gt=0, le=MAX_BACKOFF_RECOVERY)
    max_url_length: int | None = Field(None, ge=32, le=2_048)
    max_path_repeats: int | None = Field(None, ge=1, le=100)
    priorities: tuple[PriorityRule, ...] | None = None
    extract: Selectors | None = None
    fetch: FetchSpec | None = None
    fetch_rules: tuple[FetchRule, ...] | None = None
    max_credits: float | None = Field(None, gt=0)
    structured: tuple[Structured, ...] | None = None
    parse: Hook | None = None
    parsers: tuple[ParseRule, ...] | None = None
    # Unset: the defaults'; `null` or `off`: off for this domain, whatever the defaults say.
    recrawl: Annotated[Recrawl | None, BeforeValidator(_off)] = None
    recrawl_rules: tuple[RecrawlRule, ...] | None = None
    history: Annotated[History | None, BeforeValidator(_off)] = None
    sitemaps: Sitemaps | None = None
    archive: bool | None = None
    content: Annotated[ContentRules | None, BeforeValidator(_content)] = None
    near_duplicates: Annotated[NearDuplicates | None, BeforeValidator(_near)] = None
    expect: Expect | None = None


@lru_cache(maxsize=1024)
def _recrawl_cached(items: tuple[tuple[str, Any], ...]) -> Recrawl:
    return Recrawl.model_validate(dict(items))


def _recrawl(settings: dict[str, Any]) -> Recrawl:
    # A rule's merge is asked per page: the same few settings, validated once.
    return _recrawl_cached(tuple(sorted(settings.items())))


def _valid_domain(name: str) -> str:
    domain = name.strip().lower().rstrip(".")
    labels = domain.split(".")
    if (
        not domain
        or len(domain) > 253
        or any(
            not label or len(label) > 63 or not all(c.isalnum() or c == "-" for c in label)
            for label in labels
        )
    ):
        raise ValueError(f"{name!r} is not a host name (expected e.g. shop.example)")
    return domain


class DedupConfig(_Strict):
    """How the seen URLs are kept in Redis (crawler/dedup.py); read once, when a process starts."""

    mode: Literal["plain", "compact", "bloom"] = "plain"
    # URLs the crawl is planned for: sizes the Bloom bitmap and the compact bucket count. More still
    # works: compact then grows less compact, Bloom's false-positive rate rises.
    capacity: int = Field(10_000_000, ge=1_000, le=1_000_000_000)
    error_rate: float = Field(0.001, ge=1e-6, le=0.1)  # Bloom's false-positive rate at `capacity`
    buckets: int | None = Field(None, ge=2, le=100_000_000)  # compact; None: capacity / 256


class FrontierConfig(_Strict):
    """The kind of RabbitMQ queues the frontier is made of; read when the topology is declared."""

    # classic: one node's queues, ten priority levels. quorum: replicated over `replicas` nodes of a
    # cluster (Raft), surviving the loss of a minority of them; priorities in two bands.
    queue_type: Literal["classic", "quorum"] = "classic"
    replicas: int = Field(3, ge=1, le=9)
    # A quorum queue dead-letters a message returned this many times (a worker dying on it, say)
    # instead of delivering it for ever; shutdowns and reconnects return messages too, so keep room.
    delivery_limit: int = Field(20, ge=2, le=1_000)


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


class Webhook(_Strict):
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
        return tuple(_valid_domain(d) for d in value)

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


class CrawlConfig(_Strict):
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
    # Receivers of the change feed as signed HTTP POSTs (docs/outputs.md).
    webhooks: tuple[Webhook, ...] = ()

    @field_validator("resolve")
    @classmethod
    def _resolve_to_ips(cls, value: dict[str, str]) -> dict[str, str]:
        out = {}
        for host, ip in value.items():
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"{host!r}: {ip!r} is not an IP address") from None
            out[_valid_domain(host)] = ip
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
            domain = _valid_domain(str(name))
            if domain in out:
                raise ValueError(f"{name!r} is listed twice")
            out[domain] = {} if rules is None else rules
        return out

    @model_validator(mode="after")
    def _no_nested_domains(self) -> CrawlConfig:
        # A host routes to exactly one queue; nested domains would bind it to two.
        for domain in self.domains:
            for other in self.domains:
                if other != domain and other.endswith("." + domain):
                    raise ValueError(
                        f"domains: {other!r} lies inside {domain!r}; a host must belong to one "
                        "domain, so list only one of them"
                    )
        return self

    @model_validator(mode="after")
    def _webhooks_known(self) -> CrawlConfig:
        seen: set[str] = set()
        for i, hook in enumerate(self.webhooks):
            if hook.url in seen:
                raise ValueError(f"webhooks.{i}: {hook.url} is listed twice (a receiver is known by its URL)")
            seen.add(hook.url)
            unknown = [d for d in hook.domains if d not in self.domains]
            if unknown:
                raise ValueError(
                    f"webhooks.{i}.domains: not configured under `domains:`: {', '.join(unknown)}"
                )
            self._webhook_address(i, hook)
        return self

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
        return {domain: self._merged(overrides) for domain, overrides in self.domains.items()}

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

    def domain_of(self, host: str) -> str | None:
        """The configured domain that owns `host` (itself or a parent), or None."""
        host = host.lower().rstrip(".")
        while True:
            if host in self.domains:
                return host
            _, dot, host = host.partition(".")
            if not dot:
                return None

    def rules_for(self, domain: str | None) -> Rules:
        """Rules of a configured domain, or the defaults for any other host."""
        return self.rules.get(domain, self.defaults) if domain else self.defaults

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


def _format_errors(path: str, text: str, exc: ValidationError) -> str:
    """One line: each error as `file:line: key.path: what is wrong`, the line that of its key."""
    try:
        root: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    return "; ".join(f"{path}{_line_of(root, err['loc'])}: {_describe(err)}" for err in exc.errors())


def _describe(err: ErrorDetails) -> str:
    # A mistyped key in `expect:` is answered with the key meant (`regex`: did you mean 'pattern'?).
    loc = err["loc"]
    if err["type"] == "extra_forbidden" and "expect" in loc[:-1]:
        return f"{'.'.join(str(p) for p in loc)}: {unknown_key(str(loc[-1]))}"
    return describe(err)


def _line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> str:
    """`:N`, the line of the key at `loc` (or of the deepest part of it found), or "" if none is."""
    line = ""
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if found is None:
                break
            line, node = f":{found[0].start_mark.line + 1}", found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = f":{node.start_mark.line + 1}"
        else:
            break
    return line


def parse_config(text: str, source: str = "<config>") -> CrawlConfig:
    """Validate YAML text as a crawl config; raise ConfigError naming the key path and the rule."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}{yaml_error(exc)}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        return CrawlConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, text, exc)) from None


def yaml_error(exc: yaml.YAMLError) -> str:
    """A YAML error in one line after its file's name: `:line:column: not valid YAML: the problem`."""
    mark = getattr(exc, "problem_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{where}: not valid YAML: {problem}{f' ({context})' if context else ''}"


def with_dedup_mode(config: CrawlConfig, mode: str | None, source: str = "CRAWLER_DEDUP") -> CrawlConfig:
    """`config` with its dedup mode set to `mode` (from the environment, overriding the file), if any."""
    if not mode:
        return config
    try:
        dedup = DedupConfig.model_validate({**config.dedup.model_dump(), "mode": mode.strip().lower()})
    except ValidationError as exc:
        # One setting, one line: the file's own errors list a line per key instead.
        why = "; ".join(e["msg"] for e in exc.errors())
        raise ConfigError(f"{source}={mode!r}: {why}") from None
    return config.model_copy(update={"dedup": dedup})


def load_config(path: str | Path) -> CrawlConfig:
    """Read and validate domains.yaml."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the config ({exc.strerror}); pass --config or set CRAWLER_CONFIG"
        ) from None
    return parse_config(text, str(path))
