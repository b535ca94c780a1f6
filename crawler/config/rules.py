"""A domain's crawl rules: what is fetched, how, how often, what is extracted and expected; with
inherited defaults (`Rules`) and a domain's overrides of them (`DomainRules`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    field_validator,
    model_validator,
)

from crawler.config.checks import (
    Duration,
    Hook,
    Strict,
    check_css,
    check_pattern,
    check_xpath,
    css_to_xpath,
    none_if_off,
)
from crawler.quality.expect import Expect

Priority = Annotated[int, Field(ge=0, le=9)]


FieldType = Literal["str", "int", "float", "price", "date", "bool"]
Structured = Literal["json-ld", "opengraph", "microdata"]


class FieldRule(Strict):
    """One `extract` field: where its value is (css or xpath), how to read it, what type it has.

    The short form `title: h1` is `{css: h1}`.
    """

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
            check_pattern(self.regex)
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


class PriorityRule(Strict):
    """URLs whose path and query match `match` (a regular expression) get `priority`."""

    match: Annotated[str, AfterValidator(check_pattern)]
    priority: Annotated[int, Field(ge=0, le=9)]


class ParseRule(Strict):
    """Pages whose path and query match `match` (a regular expression) go through the hook `parse`."""

    match: Annotated[str, AfterValidator(check_pattern)]
    parse: Hook


class FetchSpec(Strict):
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
    wait_for: Annotated[str, AfterValidator(check_css)] | None = None

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


class FetchRule(Strict):
    """URLs whose path and query match `match` (a regular expression) are fetched as `fetch` says."""

    match: Annotated[str, AfterValidator(check_pattern)]
    fetch: FetchSpec


MAX_BACKOFF_RECOVERY = 3_600.0  # seconds: the longest a back-off may take to double back
MIN_EVERY = 3_600.0  # recrawl.min when not given: an hour, or `every` if that is shorter
MAX_EVERY = 30 * 86_400.0  # recrawl.max when not given: 30 days, or `every` if that is longer


class Recrawl(Strict):
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


class History(Strict):
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


class ContentRules(Strict):
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


class NearDuplicates(Strict):
    """Near-duplicates of a domain with `content` on: its pages' simhashes claimed in the fleet's index
    (crawler/dedup/near.py) within `distance` bits; with `skip_links`, a near-duplicate's links are
    not followed (mirrors, session-id traps)."""

    distance: int = Field(3, ge=0, le=4)
    skip_links: bool = False


class RecrawlRule(Strict):
    """URLs whose path and query match `match` (a regular expression) are recrawled with these
    settings over the domain's `recrawl` (or over its defaults, if the domain's is off)."""

    match: Annotated[str, AfterValidator(check_pattern)]
    every: Duration | None = None
    min: Duration | None = None
    max: Duration | None = None
    adaptive: bool | None = None
    drop_after: int | None = Field(None, ge=1, le=1_000)


class Rules(Strict):
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
    recrawl: Annotated[Recrawl | None, BeforeValidator(none_if_off)] = None  # None: each page once per crawl
    recrawl_rules: tuple[RecrawlRule, ...] = ()  # per URL; the first match wins
    # Versions of each page and the change feed; None (the default, or `history: off`): neither.
    # Off unless asked, as `recrawl` is: a version of every page costs a first crawl ~50 % more CPU.
    history: Annotated[History | None, BeforeValidator(none_if_off)] = None
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
    def sitemaps_every(self) -> float | None:
        """Seconds between rounds of reading the domain's sitemaps on schedule; None if it reads none."""
        if self.sitemaps is False or not self.recrawls:
            return None
        return (self.recrawl or Recrawl()).every

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


class DomainRules(Strict):
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
    recrawl: Annotated[Recrawl | None, BeforeValidator(none_if_off)] = None
    recrawl_rules: tuple[RecrawlRule, ...] | None = None
    history: Annotated[History | None, BeforeValidator(none_if_off)] = None
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
