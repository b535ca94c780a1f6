"""A worker's Prometheus metrics as data: each one's name, kind, help text and labels.

docs/metrics.md lists them, and the Grafana dashboard and the alert rules in deploy/ read only these:
a name, label or help text changed here changes what they see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Self, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from crawler.names import DISCOVERED_LABEL, LISTED_LABEL

Kind = Literal["counter", "gauge", "histogram"]
_M = TypeVar("_M", Counter, Gauge, Histogram)

FETCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# Acks follow their commit by the links' confirms, a Redis write and a frame. Bounds at most 1.67x
# apart, so a quantile read from them is within that of the truth.
ACK_BUCKETS = (
    *(0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075),
    *(0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0),
)
UPLOAD_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
WEBHOOK_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

_DOMAIN = ("domain",)
_QUEUE = ("queue", "kind", "domain")


@dataclass(frozen=True, slots=True)
class Declared:
    """One metric: its name as declared (a counter's without _total), kind, help text and labels."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()


WORKER_METRICS: tuple[Declared, ...] = (
    Declared(
        "crawler_pages",
        "counter",
        "Pages crawled to a final outcome (stored), by domain, HTTP status class and outcome",
        ("domain", "status_class", "outcome"),
    ),
    Declared(
        "crawler_extraction_failures",
        "counter",
        "Pages stored as failed because a required field was missing (field) or the parse hook "
        'failed (field="(parse hook)")',
        ("domain", "field"),
    ),
    Declared(
        "crawler_fetch_duration_seconds",
        "histogram",
        "Duration of every fetch attempt (one request)",
        _DOMAIN,
        FETCH_BUCKETS,
    ),
    Declared("crawler_fetched_bytes", "counter", "Body bytes read from fetched pages", _DOMAIN),
    Declared(
        "crawler_errors",
        "counter",
        "Failed fetch attempts and internal failures, by kind (timeout, connect, http_503, ...)",
        ("domain", "kind"),
    ),
    Declared("crawler_retries", "counter", "Messages sent to a retry tier to be tried again later", _DOMAIN),
    Declared(
        "crawler_dead_letters",
        "counter",
        "Messages set aside in the dead queue (retries exhausted, or invalid)",
        ("domain", "reason"),
    ),
    Declared(
        "crawler_pages_skipped",
        "counter",
        "Pages not fetched by policy (max_pages reached)",
        ("domain", "reason"),
    ),
    Declared("crawler_links_routed", "counter", "Links published into the frontier", _DOMAIN),
    Declared(
        "crawler_links_dropped",
        "counter",
        "Links not routed: out of scope, too deep, traps, over quota or invalid",
        ("domain", "reason"),
    ),
    Declared("crawler_dedup_hits", "counter", "Links already seen by the crawl (not routed again)", _DOMAIN),
    Declared("crawler_dedup_misses", "counter", "Links seen for the first time (routed)", _DOMAIN),
    Declared(
        "crawler_rate_wait_seconds",
        "histogram",
        "Time spent waiting for a rate-limit token before a fetch",
        _DOMAIN,
        WAIT_BUCKETS,
    ),
    Declared(
        "crawler_ack_delay_seconds",
        "histogram",
        "Time from a delivery's work being done (row committed, or retry copy confirmed) to its ack: "
        "what a crash in between would do again",
        ("after",),
        ACK_BUCKETS,
    ),
    Declared(
        "crawler_ack_frames",
        "counter",
        "basic.ack frames sent for deliveries done: single, or multiple (covering a run of them)",
        ("kind",),
    ),
    Declared(
        "crawler_refreshes",
        "counter",
        "Stored pages fetched again on their schedule, by what the fetch found",
        ("domain", "found"),
    ),
    Declared(
        "crawler_versions",
        "counter",
        "New versions of pages stored and published to the change feed, by kind",
        ("domain", "kind"),
    ),
    Declared(
        "crawler_content_pages",
        "counter",
        "Pages and documents of domains with content on, by what their content came to (made, "
        "near_duplicate, none, refused) and why one was refused",
        ("domain", "outcome", "reason"),
    ),
    Declared(
        "crawler_sitemap_files",
        "counter",
        "Sitemap files read, by outcome "
        "(read, not_modified, unchanged, redirected, missing, failed, disallowed)",
        ("domain", "outcome"),
    ),
    Declared(
        "crawler_sitemap_urls",
        "counter",
        "URLs listed by sitemaps, by what they became (discovered, known, modified, sitemaps, "
        "dropped) and why one was dropped",
        ("domain", "outcome", "reason"),
    ),
    Declared(
        "crawler_archive_records",
        "counter",
        "Answers written to the WARC archive, by record (response, revisit)",
        ("domain", "record"),
    ),
    Declared(
        "crawler_archive_bytes",
        "counter",
        "Bytes written to the WARC archive (gzipped records, request and DOM included)",
        _DOMAIN,
    ),
    Declared(
        "crawler_archive_uploads",
        "counter",
        "WARC files this process tried to upload to object storage, by outcome (uploaded, failed)",
        ("outcome",),
    ),
    Declared("crawler_archive_uploaded_bytes", "counter", "Bytes of WARC files uploaded to object storage"),
    Declared(
        "crawler_archive_files_waiting",
        "gauge",
        "Finished WARC files in this process's spool not yet in object storage",
    ),
    Declared(
        "crawler_archive_bytes_waiting", "gauge", "Bytes of the finished WARC files waiting for their upload"
    ),
    Declared(
        "crawler_archive_upload_seconds",
        "histogram",
        "Seconds a WARC file's upload took, checks included",
        buckets=UPLOAD_BUCKETS,
    ),
    Declared(
        "crawler_webhook_deliveries",
        "counter",
        "Versions POSTed to webhook receivers, by receiver (host) and outcome (delivered, retried, dead)",
        ("webhook", "outcome"),
    ),
    Declared(
        "crawler_webhook_seconds",
        "histogram",
        "Seconds a version's POSTs to its receivers took, together",
        buckets=WEBHOOK_BUCKETS,
    ),
    Declared(
        "crawler_inflight_messages", "gauge", "Messages being processed now (delivered, not acked)", _DOMAIN
    ),
    Declared("crawler_credits_used", "counter", "Credits spent on paid fetch backends", ("backend",)),
    Declared(
        "crawler_queue_messages_ready",
        "gauge",
        "Messages ready in a queue, as this worker last sampled it (take max across workers)",
        _QUEUE,
    ),
    Declared(
        "crawler_queue_consumers",
        "gauge",
        "Consumers of a queue, as this worker last sampled it (take max across workers)",
        _QUEUE,
    ),
    Declared(
        "crawler_frontier_messages_ready",
        "gauge",
        "Messages ready in the domain queues this worker samples, summed (take max across workers)",
    ),
    Declared("crawler_heartbeat_timestamp_seconds", "gauge", "Unix time of this worker's last heartbeat"),
    Declared("crawler_worker_start_time_seconds", "gauge", "Unix time this worker started"),
    Declared(
        "crawler_discovered_hosts",
        "gauge",
        "Discovered hosts of the fleet's crawls by state (known, active, waiting, parked), as this "
        "worker last read them (take max across workers)",
        ("state",),
    ),
    Declared(
        "crawler_host_shards_messages_ready",
        "gauge",
        "Messages ready in the host layout's shard queues, summed, as this worker last sampled them "
        "(take max across workers)",
    ),
    Declared(
        "crawler_broker_blocked",
        "gauge",
        "1 while RabbitMQ blocks this worker's publishes (a memory or disk alarm), else 0",
    ),
    Declared(
        "crawler_broker_blocked_seconds",
        "gauge",
        "Seconds RabbitMQ has blocked this worker's publishes since it started",
    ),
)


class DomainLabels:
    """How a `domain` label value is written: a discovered host's as DISCOVERED_LABEL and a domain
    the host layout serves as LISTED_LABEL, so there is never a series per host of the open web or
    per line of a domains file; `discovered` and `listed` say which (none until a consumer says)."""

    def __init__(self) -> None:
        self.discovered: Callable[[str], bool] = lambda domain: False
        self.listed: Callable[[str], bool] = lambda domain: False

    def __call__(self, domain: object) -> object:
        if not isinstance(domain, str) or not domain:
            return domain
        if self.discovered(domain):
            return DISCOVERED_LABEL
        return LISTED_LABEL if self.listed(domain) else domain


class _Folding:
    """A metric whose `domain` label (if it has one) is written by its DomainLabels."""

    _fold: DomainLabels | None = None
    _domain_at = -1

    def _folded(
        self, values: tuple[object, ...], named: dict[str, object]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        fold, at = self._fold, self._domain_at
        if fold is None or at < 0:
            return values, named
        if "domain" in named:
            return values, {**named, "domain": fold(named["domain"])}
        if len(values) > at:
            return (*values[:at], fold(values[at]), *values[at + 1 :]), named
        return values, named


class _Counter(_Folding, Counter):
    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        values, named = self._folded(labelvalues, labelkwargs)
        return super().labels(*values, **named)


class _Gauge(_Folding, Gauge):
    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        values, named = self._folded(labelvalues, labelkwargs)
        return super().labels(*values, **named)


class _Histogram(_Folding, Histogram):
    def labels(self, *labelvalues: object, **labelkwargs: object) -> Self:
        values, named = self._folded(labelvalues, labelkwargs)
        return super().labels(*values, **named)


class Declarations:
    """A table's metrics made in one registry, in the table's order, each fetched by name and kind;
    their `domain` labels written by `domains`."""

    def __init__(
        self,
        registry: CollectorRegistry,
        table: tuple[Declared, ...] = WORKER_METRICS,
        domains: DomainLabels | None = None,
    ) -> None:
        self.domains = domains or DomainLabels()
        self._made = {d.name: _made(d, registry, self.domains) for d in table}

    def counter(self, name: str) -> Counter:
        """The counter declared as `name`."""
        return _kind(self._made[name], Counter, name)

    def gauge(self, name: str) -> Gauge:
        """The gauge declared as `name`."""
        return _kind(self._made[name], Gauge, name)

    def histogram(self, name: str) -> Histogram:
        """The histogram declared as `name`."""
        return _kind(self._made[name], Histogram, name)


def _made(
    declared: Declared, registry: CollectorRegistry, domains: DomainLabels
) -> Counter | Gauge | Histogram:
    labels = list(declared.labels)
    made: _Counter | _Gauge | _Histogram
    if declared.kind == "counter":
        made = _Counter(declared.name, declared.help, labels, registry=registry)
    elif declared.kind == "gauge":
        made = _Gauge(declared.name, declared.help, labels, registry=registry)
    else:
        made = _Histogram(declared.name, declared.help, labels, buckets=declared.buckets, registry=registry)
    if "domain" in labels:
        made._fold, made._domain_at = domains, labels.index("domain")
    return made


def _kind(made: Counter | Gauge | Histogram, kind: type[_M], name: str) -> _M:
    if not isinstance(made, kind):
        raise TypeError(f"{name} is declared a {type(made).__name__.lower()}, not a {kind.__name__.lower()}")
    return made
