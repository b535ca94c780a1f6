"""A consumer's Prometheus metrics, in a registry of its own so several consumers never collide.

Every name is listed in docs/metrics.md; the Grafana dashboard and the alert rules in deploy/
use only these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)

from crawler.connections import Blocking
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
from crawler.frontier.settling import AckAfter
from crawler.quality.metrics import CoverageMetrics
from crawler.sink.sql import PageRecord

FETCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Acks follow their commit by the links' confirms, a Redis write and a frame. Bounds at most 1.67x
# apart, so a quantile read from them is within that of the truth.
ACK_BUCKETS = (
    *(0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075),
    *(0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0),
)

_ERROR_KINDS: tuple[tuple[type[FetchError], str], ...] = (
    (FetchTimeout, "timeout"),
    (ConnectFailed, "connect"),
    (TooLarge, "too_large"),
    (TooManyRedirects, "redirects"),
    (Refused, "refused"),
)


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


class Visited(Protocol):
    """A visit's outcome as observe_visit reads it: crawler.worker.page.Outcome, which monitoring
    does not import (the worker sits above it)."""

    @property
    def record(self) -> PageRecord: ...
    @property
    def failure(self) -> Failure | None: ...
    @property
    def rate_wait(self) -> float: ...
    @property
    def fetched(self) -> _Fetch | None: ...
    @property
    def extraction_failures(self) -> tuple[str, ...]: ...


OutcomeKind = Literal["ok", "failed", "dead", "retried", "invalid", "skipped", "cancelled", "sitemap"]


@dataclass(frozen=True, slots=True)
class DomainStats:
    """What one consumer did for one domain, as its summary prints it (failed includes dead)."""

    ok: int = 0
    failed: int = 0
    retried: int = 0
    dead: int = 0
    invalid: int = 0
    skipped: int = 0
    # Refreshes of stored pages, by what they found (crawler/worker/refresh.py).
    changed: int = 0
    not_modified: int = 0
    same_signature: int = 0
    gone: int = 0


@dataclass(frozen=True, slots=True)
class Totals:
    """One domain's counts so far, as a progress display shows them."""

    done: int = 0
    failed: int = 0
    errors: int = 0
    retries: int = 0
    dead: int = 0
    inflight: int = 0
    queued: int | None = None  # None until the queue was sampled


class Metrics:
    """The metrics of one consumer; `registry` is what its /metrics endpoint serves."""

    def __init__(self, *, process: bool = True) -> None:
        self.registry = CollectorRegistry()
        if process:
            ProcessCollector(registry=self.registry)
        r = self.registry
        self.pages = Counter(
            "crawler_pages",
            "Pages crawled to a final outcome (stored), by domain, HTTP status class and outcome",
            ["domain", "status_class", "outcome"],
            registry=r,
        )
        self.extraction_failures = Counter(
            "crawler_extraction_failures",
            "Pages stored as failed because a required field was missing (field) or the parse hook "
            'failed (field="(parse hook)")',
            ["domain", "field"],
            registry=r,
        )
        self.fetch_seconds = Histogram(
            "crawler_fetch_duration_seconds",
            "Duration of every fetch attempt (one request)",
            ["domain"],
            buckets=FETCH_BUCKETS,
            registry=r,
        )
        self.fetched_bytes = Counter(
            "crawler_fetched_bytes", "Body bytes read from fetched pages", ["domain"], registry=r
        )
        self.errors = Counter(
            "crawler_errors",
            "Failed fetch attempts and internal failures, by kind (timeout, connect, http_503, ...)",
            ["domain", "kind"],
            registry=r,
        )
        self.retries = Counter(
            "crawler_retries", "Messages sent to a retry tier to be tried again later", ["domain"], registry=r
        )
        self.dead_letters = Counter(
            "crawler_dead_letters",
            "Messages set aside in the dead queue (retries exhausted, or invalid)",
            ["domain", "reason"],
            registry=r,
        )
        self.skipped = Counter(
            "crawler_pages_skipped",
            "Pages not fetched by policy (max_pages reached)",
            ["domain", "reason"],
            registry=r,
        )
        self.links_routed = Counter(
            "crawler_links_routed", "Links published into the frontier", ["domain"], registry=r
        )
        self.links_dropped = Counter(
            "crawler_links_dropped",
            "Links not routed: out of scope, too deep, traps, over quota or invalid",
            ["domain", "reason"],
            registry=r,
        )
        self.dedup_hits = Counter(
            "crawler_dedup_hits", "Links already seen by the crawl (not routed again)", ["domain"], registry=r
        )
        self.dedup_misses = Counter(
            "crawler_dedup_misses", "Links seen for the first time (routed)", ["domain"], registry=r
        )
        self.rate_wait = Histogram(
            "crawler_rate_wait_seconds",
            "Time spent waiting for a rate-limit token before a fetch",
            ["domain"],
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.ack_delay = Histogram(
            "crawler_ack_delay_seconds",
            "Time from a delivery's work being done (row committed, or retry copy confirmed) to its ack: "
            "what a crash in between would do again",
            ["after"],
            buckets=ACK_BUCKETS,
            registry=r,
        )
        self.ack_frames = Counter(
            "crawler_ack_frames",
            "basic.ack frames sent for deliveries done: single, or multiple (covering a run of them)",
            ["kind"],
            registry=r,
        )
        self.refreshes = Counter(
            "crawler_refreshes",
            "Stored pages fetched again on their schedule, by what the fetch found",
            ["domain", "found"],
            registry=r,
        )
        self.versions = Counter(
            "crawler_versions",
            "New versions of pages stored and published to the change feed, by kind",
            ["domain", "kind"],
            registry=r,
        )
        self.content_pages = Counter(
            "crawler_content_pages",
            "Pages and documents of domains with content on, by what their content came to (made, "
            "near_duplicate, none, refused) and why one was refused",
            ["domain", "outcome", "reason"],
            registry=r,
        )
        self.sitemap_files = Counter(
            "crawler_sitemap_files",
            "Sitemap files read, by outcome "
            "(read, not_modified, unchanged, redirected, missing, failed, disallowed)",
            ["domain", "outcome"],
            registry=r,
        )
        self.sitemap_urls = Counter(
            "crawler_sitemap_urls",
            "URLs listed by sitemaps, by what they became (discovered, known, modified, sitemaps, "
            "dropped) and why one was dropped",
            ["domain", "outcome", "reason"],
            registry=r,
        )
        self.archive_records = Counter(
            "crawler_archive_records",
            "Answers written to the WARC archive, by record (response, revisit)",
            ["domain", "record"],
            registry=r,
        )
        self.archive_bytes = Counter(
            "crawler_archive_bytes",
            "Bytes written to the WARC archive (gzipped records, request and DOM included)",
            ["domain"],
            registry=r,
        )
        self.archive_uploads = Counter(
            "crawler_archive_uploads",
            "WARC files this process tried to upload to object storage, by outcome (uploaded, failed)",
            ["outcome"],
            registry=r,
        )
        self.archive_uploaded_bytes = Counter(
            "crawler_archive_uploaded_bytes", "Bytes of WARC files uploaded to object storage", registry=r
        )
        self.archive_waiting = Gauge(
            "crawler_archive_files_waiting",
            "Finished WARC files in this process's spool not yet in object storage",
            registry=r,
        )
        self.archive_waiting_bytes = Gauge(
            "crawler_archive_bytes_waiting",
            "Bytes of the finished WARC files waiting for their upload",
            registry=r,
        )
        self.archive_upload_seconds = Histogram(
            "crawler_archive_upload_seconds",
            "Seconds a WARC file's upload took, checks included",
            buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300),
            registry=r,
        )
        self.webhook_deliveries = Counter(
            "crawler_webhook_deliveries",
            "Versions POSTed to webhook receivers, by receiver (host) and outcome (delivered, retried, dead)",
            ["webhook", "outcome"],
            registry=r,
        )
        self.webhook_seconds = Histogram(
            "crawler_webhook_seconds",
            "Seconds a version's POSTs to its receivers took, together",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        # The last upload's error, "" once one succeeds: shown by `crawler status` (a text, no gauge).
        self.archive_upload_error = ""
        self.inflight = Gauge(
            "crawler_inflight_messages",
            "Messages being processed now (delivered, not acked)",
            ["domain"],
            registry=r,
        )
        self.credits = Counter(
            "crawler_credits_used", "Credits spent on paid fetch backends", ["backend"], registry=r
        )
        self.queue_ready = Gauge(
            "crawler_queue_messages_ready",
            "Messages ready in a queue, as this worker last sampled it (take max across workers)",
            ["queue", "kind", "domain"],
            registry=r,
        )
        self.queue_consumers = Gauge(
            "crawler_queue_consumers",
            "Consumers of a queue, as this worker last sampled it (take max across workers)",
            ["queue", "kind", "domain"],
            registry=r,
        )
        self.frontier_ready = Gauge(
            "crawler_frontier_messages_ready",
            "Messages ready in the domain queues this worker samples, summed (take max across workers)",
            registry=r,
        )
        self.heartbeat = Gauge(
            "crawler_heartbeat_timestamp_seconds",
            "Unix time of this worker's last heartbeat",
            registry=r,
        )
        self.started = Gauge("crawler_worker_start_time_seconds", "Unix time this worker started", registry=r)
        self.started.set_to_current_time()
        self.broker_blocked = Gauge(
            "crawler_broker_blocked",
            "1 while RabbitMQ blocks this worker's publishes (a memory or disk alarm), else 0",
            registry=r,
        )
        self.broker_blocked_seconds = Gauge(
            "crawler_broker_blocked_seconds",
            "Seconds RabbitMQ has blocked this worker's publishes since it started",
            registry=r,
        )
        # Each field's fill rate in its domain's running crawl, and its floor (docs/quality.md).
        self.coverage = CoverageMetrics(r)

    def follow_blocking(self, blocking: Blocking) -> None:
        """Report the publishing connection's blocked state, read when scraped."""
        self.broker_blocked.set_function(lambda: float(blocking.blocked))
        self.broker_blocked_seconds.set_function(blocking.seconds)

    # -- what the consumer reports ----------------------------------------------------------------

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

    def observe_visit(self, domain: str, outcome: Visited) -> None:
        """A visit: its wait for a rate token and its fetch, if it got that far."""
        fetched = outcome.fetched
        if fetched is not None:
            self.observe_rate_wait(domain, outcome.rate_wait)
            self.observe_fetch(
                domain, fetched.seconds, outcome.record.status_code, fetched.nbytes, fetched.error
            )
        elif outcome.failure is not None and outcome.failure.transient:
            self.observe_error(domain, "robots")  # robots.txt could not be had: try again later
        for name in outcome.extraction_failures:
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

    def observe_sitemap_file(self, domain: str, outcome: str) -> None:
        """A sitemap file's reading came to `outcome`."""
        self.sitemap_files.labels(domain, outcome).inc()

    def observe_sitemap_url(self, domain: str, outcome: str, reason: str, n: int = 1) -> None:
        """`n` URLs a sitemap listed came to `outcome` (for "dropped", because of `reason`)."""
        if n:
            self.sitemap_urls.labels(domain, outcome, reason).inc(n)

    def observe_archived(self, domain: str, revisit: bool, nbytes: int) -> None:
        """An answer of `domain` was archived: as a revisit or a response, in `nbytes`."""
        self.archive_records.labels(domain, "revisit" if revisit else "response").inc()
        self.archive_bytes.labels(domain).inc(nbytes)

    def observe_upload(self, nbytes: int, seconds: float) -> None:
        """A WARC file is in object storage, `nbytes` long, after `seconds`."""
        self.archive_uploads.labels("uploaded").inc()
        self.archive_uploaded_bytes.inc(nbytes)
        self.archive_upload_seconds.observe(seconds)
        self.archive_upload_error = ""

    def observe_upload_failed(self, error: str) -> None:
        """A WARC file's upload failed; it stays in the spool."""
        self.archive_uploads.labels("failed").inc()
        self.archive_upload_error = error[:300]

    def observe_uploads_waiting(self, files: int, nbytes: int) -> None:
        """Finished WARC files waiting for their upload, and their size."""
        self.archive_waiting.set(files)
        self.archive_waiting_bytes.set(nbytes)

    def observe_webhook(self, host: str, outcome: str) -> None:
        """A version's delivery to the receiver on `host`: delivered, retried or dead."""
        self.webhook_deliveries.labels(host, outcome).inc()

    def observe_webhook_seconds(self, seconds: float) -> None:
        """How long one version's POSTs took."""
        self.webhook_seconds.observe(seconds)

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

    def observe_ack_delay(self, after: AckAfter, seconds: float) -> None:
        """The time from a delivery's work being done to its ack being written."""
        self.ack_delay.labels(after).observe(seconds)

    def observe_ack_frames(self, single: int, multiple: int) -> None:
        """Ack frames written for deliveries done: `single` alone, `multiple` each covering a run."""
        if single:
            self.ack_frames.labels("single").inc(single)
        if multiple:
            self.ack_frames.labels("multiple").inc(multiple)

    def add_credits(self, backend: str, n: float) -> None:
        """Credits a paid fetch backend spent (called by the backend)."""
        self.credits.labels(backend).inc(n)

    def message_started(self, domain: str) -> None:
        """A delivery is being processed."""
        self.inflight.labels(domain).inc()

    def message_done(self, domain: str) -> None:
        """A delivery was acked, retried, set aside or returned."""
        self.inflight.labels(domain).dec()

    def observe_queue(self, queue: str, kind: str, domain: str, ready: int, consumers: int) -> None:
        """A sampled queue depth; `kind` is domain, retry, dead or unrouted."""
        self.queue_ready.labels(queue, kind, domain).set(ready)
        self.queue_consumers.labels(queue, kind, domain).set(consumers)

    def observe_frontier(self, ready: int) -> None:
        """The sum of the sampled domain queues' ready messages: one series an autoscaler can read."""
        self.frontier_ready.set(ready)

    def beat(self, when: float) -> None:
        """The worker's heartbeat at Unix time `when`."""
        self.heartbeat.set(when)
