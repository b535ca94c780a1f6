"""What became of each page a worker visited: its fetch, its one final outcome, its links and content."""

from __future__ import annotations

from typing import Literal, Protocol

from crawler.errors import (
    ConnectFailed,
    FetchError,
    FetchTimeout,
    Refused,
    TooLarge,
    TooManyRedirects,
)
from crawler.frontier.retry import Failure
from crawler.frontier.router import Routed
from crawler.monitor.metrics.declared import Declarations

_ERROR_KINDS: tuple[tuple[type[FetchError], str], ...] = (
    (FetchTimeout, "timeout"),
    (ConnectFailed, "connect"),
    (TooLarge, "too_large"),
    (TooManyRedirects, "redirects"),
    (Refused, "refused"),
)

OutcomeKind = Literal["ok", "failed", "dead", "retried", "invalid", "skipped", "cancelled", "sitemap"]


def status_class(status: int | None) -> str:
    """An HTTP status as its class (2xx ... 5xx), or "none" when there was no response."""
    return f"{status // 100}xx" if status is not None and 100 <= status <= 599 else "none"


def error_kind(error: FetchError | None, status: int | None) -> str | None:
    """What kind of error a fetch ended in (timeout, connect, http_503, ...), or None if none."""
    if error is not None:
        return next((kind for cls, kind in _ERROR_KINDS if isinstance(error, cls)), "fetch")
    if status is not None and status >= 400:
        return f"http_{status}"
    return None


class _Fetch(Protocol):
    """How a fetch went, as observe_visit reads it."""

    @property
    def seconds(self) -> float: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def error(self) -> FetchError | None: ...


class ObservedVisit(Protocol):
    """A visit as observe_visit reads it (crawler.worker.page.Visit: the worker sits above
    monitoring, which does not import it)."""

    @property
    def failure(self) -> Failure | None: ...
    @property
    def rate_wait(self) -> float: ...
    @property
    def fetched(self) -> _Fetch | None: ...
    @property
    def extraction_failures(self) -> tuple[str, ...]: ...


class VisitMetrics:
    """Pages, fetches, errors, links, content, refreshes and versions, by domain."""

    def __init__(self, declared: Declarations) -> None:
        self.pages = declared.counter("crawler_pages")
        self.extraction_failures = declared.counter("crawler_extraction_failures")
        self.fetch_seconds = declared.histogram("crawler_fetch_duration_seconds")
        self.fetched_bytes = declared.counter("crawler_fetched_bytes")
        self.errors = declared.counter("crawler_errors")
        self.retries = declared.counter("crawler_retries")
        self.dead_letters = declared.counter("crawler_dead_letters")
        self.skipped = declared.counter("crawler_pages_skipped")
        self.links_routed = declared.counter("crawler_links_routed")
        self.links_dropped = declared.counter("crawler_links_dropped")
        self.dedup_hits = declared.counter("crawler_dedup_hits")
        self.dedup_misses = declared.counter("crawler_dedup_misses")
        self.rate_wait = declared.histogram("crawler_rate_wait_seconds")
        self.refreshes = declared.counter("crawler_refreshes")
        self.versions = declared.counter("crawler_versions")
        self.content_pages = declared.counter("crawler_content_pages")
        self.credits = declared.counter("crawler_credits_used")

    def observe_fetch(
        self,
        domain: str,
        seconds: float,
        status: int | None,
        nbytes: int = 0,
        error: FetchError | None = None,
    ) -> None:
        """One fetch attempt: its duration, bytes, and its error if it failed."""
        self.fetch_seconds.labels(domain).observe(seconds)
        if nbytes:
            self.fetched_bytes.labels(domain).inc(nbytes)
        kind = error_kind(error, status)
        if kind is not None:
            self.errors.labels(domain, kind).inc()

    def observe_visit(self, domain: str, visit: ObservedVisit, status: int | None) -> None:
        """A visit whose answer had HTTP `status`: its wait for a rate token and its fetch, if it got
        that far."""
        fetched = visit.fetched
        if fetched is not None:
            self.observe_rate_wait(domain, visit.rate_wait)
            self.observe_fetch(domain, fetched.seconds, status, fetched.nbytes, fetched.error)
        elif visit.failure is not None and visit.failure.transient:
            self.observe_error(domain, "robots")  # robots.txt could not be had: try again later
        for name in visit.extraction_failures:
            self.observe_extraction_failure(domain, name)

    def observe_extraction_failure(self, domain: str, field: str) -> None:
        """A page failed extraction: a required `field` was missing, or its parse hook failed."""
        self.extraction_failures.labels(domain, field).inc()

    def observe_outcome(
        self, domain: str, kind: OutcomeKind, status: int | None = None, reason: str = "max_pages"
    ) -> None:
        """A delivery's one final word; the summary, /metrics and the progress display all read it.

        ok, failed and dead pages were stored (dead ones also set aside); retried went to a retry
        tier; invalid messages were set aside unread; skipped ones were not fetched by policy;
        cancelled ones belong to a cancelled crawl (counted as skipped, reason "cancelled").
        """
        if kind in ("ok", "failed", "dead"):
            self.pages.labels(domain, status_class(status), "ok" if kind == "ok" else "failed").inc()
        if kind == "dead":
            self.dead_letters.labels(domain, "exhausted").inc()
        elif kind == "invalid":
            self.dead_letters.labels(domain, "invalid").inc()
        elif kind == "retried":
            self.retries.labels(domain).inc()
        elif kind == "skipped":
            self.skipped.labels(domain, reason).inc()
        elif kind == "cancelled":
            self.skipped.labels(domain, "cancelled").inc()

    def observe_content(self, domain: str, outcome: str, reason: str = "") -> None:
        """A page's content came to `outcome`: made, near_duplicate, none, or refused (for `reason`)."""
        self.content_pages.labels(domain, outcome, reason).inc()

    def observe_error(self, domain: str, kind: str) -> None:
        """A failure that is not a fetch's (e.g. "internal": the broker or database failed)."""
        self.errors.labels(domain, kind).inc()

    def observe_links(self, domain: str, routed: Routed) -> None:
        """What became of a routed batch (a page's links, or its redirect): routed, seen, or dropped."""
        self.links_routed.labels(domain).inc(len(routed.published))
        self.dedup_misses.labels(domain).inc(len(routed.published))
        self.dedup_hits.labels(domain).inc(routed.seen)
        for reason, n in routed.dropped().items():
            if n:
                self.links_dropped.labels(domain, reason).inc(n)

    def observe_rate_wait(self, domain: str, seconds: float) -> None:
        """Time a fetch to `domain` waited for a rate-limit token (called by the rate limiter)."""
        self.rate_wait.labels(domain).observe(seconds)

    def observe_version(self, domain: str, kind: str) -> None:
        """A new version of a page, stored: new, changed, gone or back."""
        self.versions.labels(domain, kind).inc()

    def observe_refresh(self, domain: str, found: str) -> None:
        """A refresh's final answer: changed, not_modified, same_signature, gone or failed."""
        self.refreshes.labels(domain, found).inc()

    def add_credits(self, backend: str, n: float) -> None:
        """Credits a paid fetch backend spent (called by the backend)."""
        self.credits.labels(backend).inc(n)
