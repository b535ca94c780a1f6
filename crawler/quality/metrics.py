"""`crawler_field_coverage` and its floor, for Prometheus: set from the coverage table by the process
that reads a running crawl's coverage, in the registry it serves; deploy/prometheus/alerts.yml's
CrawlerFieldCoverageLow fires while a field's coverage stays under its floor."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Gauge

from crawler.quality.compare import DomainQuality
from crawler.quality.report import ALL_PAGES

COVERAGE = "crawler_field_coverage"
FLOOR = "crawler_field_coverage_floor"
LABELS = ("domain", "pages", "field")


class CoverageMetrics:
    """Each field's fill rate in a domain's running crawl (pages="all", or a page rule's name), and the
    floor under which it alerts (only once enough pages were read to judge it)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.coverage = Gauge(
            COVERAGE,
            "Share of a domain's pages checked in its current crawl that have a value of the field "
            "(pages: all, or a page rule of its expect: section)",
            LABELS,
            registry=registry,
        )
        self.floor = Gauge(
            FLOOR,
            "The field coverage under which the crawler alerts: the higher of its expected rate and the "
            "last finished crawl's less max_drop; absent until enough pages were checked",
            LABELS,
            registry=registry,
        )
        self._shown: dict[str, set[tuple[str, str, str]]] = {}

    def show(self, quality: DomainQuality) -> None:
        """Set the domain's gauges from its part of the coverage table; forget the series it no longer has."""
        shown: set[tuple[str, str, str]] = set()
        floors: set[tuple[str, str, str]] = set()
        for row in quality.fields:
            rate = row.now.rate
            if rate is None:
                continue
            labels = (quality.domain, row.page_rule or ALL_PAGES, row.field)
            self.coverage.labels(*labels).set(rate)
            shown.add(labels)
            if row.floor is not None:
                self.floor.labels(*labels).set(row.floor)
                floors.add(labels)
        for labels in self._shown.get(quality.domain, set()) - shown:
            _remove(self.coverage, labels)
        for labels in self._shown.get(quality.domain, set()) - floors:
            _remove(self.floor, labels)
        self._shown[quality.domain] = shown

    def forget(self, domain: str) -> None:
        """Drop a domain's series (its crawl ended, or it left the configuration)."""
        for labels in self._shown.pop(domain, set()):
            _remove(self.coverage, labels)
            _remove(self.floor, labels)


def _remove(gauge: Gauge, labels: tuple[str, str, str]) -> None:
    with contextlib.suppress(KeyError):  # never set (a floor not yet known)
        gauge.remove(*labels)
