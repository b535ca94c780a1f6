"""The coverage table: what `crawler quality` prints and `GET /v1/crawls/{id}/quality` serves, as
text and as JSON, with a baseline column (the last crawl, or the crawl before a re-parse)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from crawler.quality.compare import Alert, DomainQuality, Thresholds, compare
from crawler.quality.coverage import Coverage, Share, percent

ALL_PAGES = "all"  # how the table names every page of a domain, beside its page rules


@dataclass(frozen=True, slots=True)
class QualityReport:
    """One crawl's coverage per domain, each beside its baseline, with the column titles to show."""

    crawl: str | None
    domains: tuple[DomainQuality, ...]
    now_label: str = "this crawl"
    before_label: str = "last crawl"
    finished: bool = False

    @property
    def alerts(self) -> int:
        """How many alerts the report raises, over every domain."""
        return sum(len(d.alerts) for d in self.domains)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data: rates as {n, of, rate}; a page rule "all" is every page."""
        return {
            "crawl": self.crawl,
            "finished": self.finished,
            "labels": {"now": self.now_label, "before": self.before_label},
            "alerts": self.alerts,
            "domains": [_domain_json(d) for d in self.domains],
        }


def alerts_json(reports: Sequence[QualityReport]) -> list[dict[str, str]]:
    """Every alert of `reports` with its crawl and domain, as `crawler status` and the console show them."""
    return [
        {"crawl": r.crawl or "", "domain": d.domain, **_alert_json(a)}
        for r in reports
        for d in r.domains
        for a in d.alerts
    ]


def _alert_json(a: Alert) -> dict[str, str]:
    return {"kind": a.kind, "pages": _page_rule(a.page_rule), "subject": a.subject, "message": a.message}


def reparse_report(
    crawl: str,
    before: Mapping[str, Coverage],
    after: Mapping[str, Coverage],
    thresholds: Mapping[str, Thresholds],
) -> QualityReport:
    """A re-parse's report: each domain's coverage after it beside the same crawl's before it."""
    domains = tuple(
        compare(
            domain, after[domain], thresholds.get(domain, Thresholds()), before.get(domain), baseline=crawl
        )
        for domain in sorted(after)
    )
    return QualityReport(crawl, domains, now_label="after", before_label="before", finished=True)


def _share(share: Share | None) -> dict[str, Any] | None:
    if share is None:
        return None
    rate = share.rate
    return {"n": share.n, "of": share.of, "rate": None if rate is None else round(rate, 4)}


def _page_rule(rule: str) -> str:
    return rule or ALL_PAGES


def _domain_json(d: DomainQuality) -> dict[str, Any]:
    return {
        "domain": d.domain,
        "baseline": d.baseline,
        "invalid": d.invalid,
        "items": [
            {
                "pages": _page_rule(r.page_rule),
                "now": r.now,
                "before": r.before,
                "min": r.minimum,
                "alerts": list(r.alerts),
            }
            for r in d.items
        ],
        "fields": [
            {
                "pages": _page_rule(r.page_rule),
                "field": r.field,
                "now": _share(r.now),
                "before": _share(r.before),
                "expected": r.expected,
                "floor": None if r.floor is None else round(r.floor, 4),
                "alerts": list(r.alerts),
            }
            for r in d.fields
        ],
        "expectations": [
            {
                "name": r.name,
                "pages": _page_rule(r.page_rule),
                "failed": _share(r.now),
                "before": _share(r.before),
                "alerts": list(r.alerts),
            }
            for r in d.expectations
        ],
        "alerts": [_alert_json(a) for a in d.alerts],
    }


def render(report: QualityReport) -> str:
    """The report as a text table per domain, for a terminal."""
    head = f"crawl {report.crawl}" if report.crawl else "crawl"
    state = "finished" if report.finished else "running"
    lines = [f"{head} ({state}): {report.alerts} alert{'' if report.alerts == 1 else 's'}"]
    if not report.domains:
        lines.append("no page checked yet")
    for d in report.domains:
        lines.append("")
        lines.extend(_domain_lines(d, report.before_label, report.now_label))
    return "\n".join(lines)


def _domain_lines(d: DomainQuality, before: str, now: str) -> list[str]:
    baseline = f", {before}: {d.baseline}" if d.baseline else f", no {before}"
    total = next((r.now for r in d.items if not r.page_rule), 0)
    out = [f"{d.domain}: {total} items, {d.invalid} invalid{baseline}"]
    rows: list[tuple[str, ...]] = [("pages", "field", before, now, "expected", "")]
    for r in d.items:
        minimum = f">= {r.minimum}" if r.minimum is not None else ""
        shown = "" if r.before is None else str(r.before)
        rows.append((_page_rule(r.page_rule), "(items)", shown, str(r.now), minimum, _flags(r.alerts)))
    for f in d.fields:
        expected = f">= {percent(f.expected)}" if f.expected is not None else ""
        rows.append(
            (_page_rule(f.page_rule), f.field, _rate(f.before), _rate(f.now), expected, _flags(f.alerts))
        )
    out.extend(_table(rows))
    if d.expectations:
        failed = [("pages", "expectation", f"failed, {before}", f"failed, {now}", "", "")]
        for e in d.expectations:
            failed.append(
                (
                    _page_rule(e.page_rule),
                    e.name,
                    _rate(e.before, count=True),
                    _rate(e.now, count=True),
                    "",
                    _flags(e.alerts),
                )
            )
        out.extend(["", *_table(failed)])
    out.extend(f"  ! {a.message}" for a in d.alerts)
    return out


def _table(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.ljust(width) if i < 2 or i == len(row) - 1 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  " + "  ".join(cells).rstrip())
    return lines


def _rate(share: Share | None, *, count: bool = False) -> str:
    if share is None or share.rate is None:
        return "-"
    return f"{share.n} ({percent(share.rate)})" if count else percent(share.rate)


def _flags(alerts: tuple[str, ...]) -> str:
    return ("ALERT " + ", ".join(a.replace("_", " ") for a in alerts)) if alerts else ""
