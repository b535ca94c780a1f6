"""A worker's metrics read back: every view (the summary, the progress display, the heartbeat, the
exit log) reads the one count each outcome has."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from crawler.frontier.settling import AckAfter
from crawler.monitor.metrics import DomainStats, Metrics, Totals
from crawler.names import HEARTBEAT_TTL

Tally = dict[str, dict[str, float]]
"""Counts per domain, per key."""


def totals(metrics: Metrics, domain: str) -> Totals:
    """The domain's counts so far."""
    return all_totals(metrics).get(domain, Totals())


def all_totals(metrics: Metrics) -> dict[str, Totals]:
    """Every domain's counts so far, in one pass over the samples (not one per domain)."""
    counts: Tally = {}
    _add(counts, metrics.pages, "done")
    _add(counts, metrics.pages, "failed", outcome="failed")
    _add(counts, metrics.errors, "errors")
    _add(counts, metrics.retries, "retries")
    _add(counts, metrics.dead_letters, "dead")
    _add(counts, metrics.inflight, "inflight")
    _add(counts, metrics.queue_ready, "queued", kind="domain")
    return {
        domain: Totals(
            done=int(c.get("done", 0)),
            failed=int(c.get("failed", 0)),
            errors=int(c.get("errors", 0)),
            retries=int(c.get("retries", 0)),
            dead=int(c.get("dead", 0)),
            inflight=int(c.get("inflight", 0)),
            queued=int(c["queued"]) if "queued" in c else None,
        )
        for domain, c in counts.items()
    }


def summary(metrics: Metrics, domains: Sequence[str] = ()) -> dict[str, DomainStats]:
    """Each domain's outcomes so far (every one of `domains`, zeros included), from the same counts."""
    counts: Tally = {d: {} for d in domains}
    _add(counts, metrics.pages, "ok", outcome="ok")
    _add(counts, metrics.pages, "failed", outcome="failed")
    _add(counts, metrics.retries, "retried")
    _add(counts, metrics.dead_letters, "dead", reason="exhausted")
    _add(counts, metrics.dead_letters, "invalid", reason="invalid")
    _add(counts, metrics.skipped, "skipped")
    for found in ("changed", "not_modified", "same_signature", "gone"):
        _add(counts, metrics.refreshes, found, found=found)
    return {d: DomainStats(**{k: int(v) for k, v in c.items()}) for d, c in counts.items() if d}


NETWORK_ERRORS = frozenset({"timeout", "connect", "too_large", "redirects", "refused", "fetch"})
REFUSALS = ("403", "429")  # the answers of a site that is pushing back


def answers(metrics: Metrics) -> Tally:
    """What this worker's fetches came to so far, per domain: pages stored ok and failed, and failed
    attempts by status class (4xx, 5xx, network), with 403 and 429 counted apart too."""
    counts: Tally = {}
    _add(counts, metrics.pages, "ok", outcome="ok")
    _add(counts, metrics.pages, "failed", outcome="failed")
    for s in _samples(metrics.errors):
        kind = s.labels.get("kind", "")
        if s.name.endswith("_created"):
            continue
        keys = ["network"] if kind in NETWORK_ERRORS else []
        if kind.startswith("http_") and kind[5:].isdigit():
            keys = [f"{kind[5]}xx", *(k for k in REFUSALS if kind[5:] == k)]
        into = counts.setdefault(s.labels.get("domain", ""), {})
        for key in keys:
            into[key] = into.get(key, 0.0) + s.value
    return counts


def pages_done(metrics: Metrics) -> int:
    """Pages this worker brought to a final outcome, every domain together."""
    return int(_sum(metrics.pages))


def archive_waiting(metrics: Metrics) -> int:
    """Finished WARC files of this worker not yet in object storage."""
    return int(_sum(metrics.archive_waiting))


def health(metrics: Metrics, max_age: float = HEARTBEAT_TTL, now: float | None = None) -> tuple[bool, str]:
    """Whether the last heartbeat is at most `max_age` seconds old, and a line saying so."""
    beat = _sum(metrics.heartbeat)
    if beat <= 0:
        return False, "no heartbeat yet"
    age = (time.time() if now is None else now) - beat
    return age <= max_age, f"last heartbeat {age:.1f}s ago (limit {max_age:g}s)"


def ack_delay_quantile(metrics: Metrics, q: float, after: AckAfter) -> tuple[int, float | None]:
    """How many acks were observed after `after`, and their `q` quantile in seconds (None if none),
    interpolated within its bucket as Prometheus' histogram_quantile does."""
    buckets = sorted(
        (float(s.labels["le"]), s.value)
        for s in _samples(metrics.ack_delay)
        if s.name.endswith("_bucket") and s.labels.get("after") == after
    )
    count = int(buckets[-1][1]) if buckets else 0
    if count == 0:
        return 0, None
    rank, lower, below = q * count, 0.0, 0.0
    for upper, cumulative in buckets:
        if cumulative >= rank:
            if upper == float("inf"):
                return count, lower  # past the last bound: the last bound is all that is known
            return count, lower + (upper - lower) * (rank - below) / (cumulative - below)
        lower, below = upper, cumulative
    return count, lower


def ack_frames(metrics: Metrics) -> tuple[int, int]:
    """Ack frames written for deliveries done so far, and how many of them were `multiple`."""
    single = multiple = 0.0
    for s in _samples(metrics.ack_frames):
        if s.name.endswith("_total"):
            if s.labels.get("kind") == "multiple":
                multiple += s.value
            else:
                single += s.value
    return int(single + multiple), int(multiple)


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name a /metrics endpoint of `registry` can show (with _total, _bucket, ... suffixes)."""
    names: set[str] = set()
    for family in registry.collect():
        suffixes = {
            "counter": ("_total", "_created"),
            "histogram": ("_bucket", "_count", "_sum", "_created"),
            "summary": ("_count", "_sum", "_created"),
        }.get(family.type, ("",))
        names.update(family.name + s for s in suffixes)
    return names


def _add(counts: Tally, metric: MetricWrapperBase, key: str, **labels: str) -> None:
    """Add `metric`'s samples that carry `labels` to `counts` under `key`, per domain."""
    for s in _samples(metric):
        if s.name.endswith("_created") or any(s.labels.get(k) != v for k, v in labels.items()):
            continue
        into = counts.setdefault(s.labels.get("domain", ""), {})
        into[key] = into.get(key, 0.0) + s.value


def _samples(metric: MetricWrapperBase) -> Iterable[Any]:
    for family in metric.collect():
        yield from family.samples


def _sum(metric: MetricWrapperBase) -> float:
    return float(sum(s.value for s in _samples(metric) if not s.name.endswith("_created")))
