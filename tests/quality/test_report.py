"""The coverage table as `crawler quality` will print it and the API serve it; a re-parse's before and
after; crawler_field_coverage and its floor set from it."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from crawler.quality.compare import Thresholds, compare
from crawler.quality.coverage import Coverage
from crawler.quality.expect import load_expect
from crawler.quality.metrics import COVERAGE, FLOOR, LABELS, CoverageMetrics
from crawler.quality.report import QualityReport, render, reparse_report

D = "shop.test"
THRESHOLDS = Thresholds.of(
    load_expect(
        {
            "fields": {"title": {"present": True}},
            "min_items": 500,
            "pages": [
                {"name": "product", "match": "^/p/", "fields": {"price": {"present": "95%", "range": "> 0"}}}
            ],
        }
    ),
    ["title", "price"],
)
BEFORE = Coverage(
    {"": 800, "product": 690},
    {("", "title"): 800, ("product", "title"): 690, ("", "price"): 688, ("product", "price"): 686},
)
BROKEN = Coverage(
    {"": 812, "product": 700},
    {("", "title"): 812, ("product", "title"): 700, ("", "price"): 25, ("product", "price"): 22},
    {"product/price.range": 2},
    2,
)


def _report() -> QualityReport:
    quality = compare(D, BROKEN, THRESHOLDS, BEFORE, finished=True, baseline="c1")
    return QualityReport("c2", (quality,), finished=True)


def test_the_text_table_shows_the_drop_beside_the_last_crawl() -> None:
    text = render(_report())
    lines = text.splitlines()
    assert lines[0] == "crawl c2 (finished): 3 alerts"
    assert "shop.test: 812 items, 2 invalid, last crawl: c1" in lines
    header = next(line for line in lines if "field" in line).split()
    assert header == ["pages", "field", "last", "crawl", "this", "crawl", "expected"]
    assert next(line for line in lines if line.split()[:2] == ["product", "price"]).split() == [
        "product",
        "price",
        "99.4%",
        "3.1%",
        ">=",
        "95.0%",
        "ALERT",
        "below",
        "expected,",
        "dropped",
    ]
    assert next(line for line in lines if "product/price.range" in line).split()[2:] == [
        "0",
        "(0.0%)",
        "2",
        "(0.3%)",
    ]
    assert "  ! price: on 3.1% of shop.test's pages, down from 86.0% in the last crawl" in lines


def test_the_docs_show_this_table() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "quality.md").read_text()
    shown = doc.split("## The coverage table", 1)[1].split("```\n", 1)[1].split("```", 1)[0]
    assert shown == render(_report()) + "\n"


def test_the_json_form_has_every_row() -> None:
    data = json.loads(json.dumps(_report().to_json()))
    assert (data["crawl"], data["finished"], data["alerts"]) == ("c2", True, 3)
    (domain,) = data["domains"]
    assert (domain["domain"], domain["baseline"], domain["invalid"]) == (D, "c1", 2)
    assert domain["items"][0] == {"pages": "all", "now": 812, "before": 800, "min": 500, "alerts": []}
    price = next(f for f in domain["fields"] if (f["pages"], f["field"]) == ("product", "price"))
    assert price["now"] == {"n": 22, "of": 700, "rate": 0.0314}
    assert price["before"] == {"n": 686, "of": 690, "rate": 0.9942}
    assert (price["expected"], price["floor"], price["alerts"]) == (0.95, 0.95, ["below_expected", "dropped"])
    rng = next(e for e in domain["expectations"] if e["name"] == "product/price.range")
    assert rng["pages"] == "product" and rng["failed"] == {"n": 2, "of": 700, "rate": 0.0029}
    assert {a["kind"] for a in domain["alerts"]} == {"below_expected", "dropped"}


def test_a_reparse_shows_before_and_after() -> None:
    report = reparse_report("c2", {D: BROKEN}, {D: BEFORE}, {D: THRESHOLDS})
    assert (report.before_label, report.now_label) == ("before", "after")
    assert report.alerts == 0
    text = render(report)
    header = next(line for line in text.splitlines() if "field" in line).split()
    assert header[:4] == ["pages", "field", "before", "after"]
    row = next(line for line in text.splitlines() if line.split()[:2] == ["product", "price"])
    assert row.split()[2:4] == ["3.1%", "99.4%"]


def test_nothing_checked_yet() -> None:
    assert render(QualityReport("c3", ())) == "crawl c3 (running): 0 alerts\nno page checked yet"


def test_the_gauges_follow_the_table() -> None:
    registry = CollectorRegistry()
    metrics = CoverageMetrics(registry)
    metrics.show(_report().domains[0])
    labels = {"domain": D, "pages": "product", "field": "price"}
    assert registry.get_sample_value(COVERAGE, labels) == 22 / 700
    assert registry.get_sample_value(FLOOR, labels) == 0.95
    assert registry.get_sample_value(COVERAGE, {**labels, "pages": "all"}) == 25 / 812
    # Too few pages to judge: the coverage stays, its floor goes (the alert rule needs both).
    few = compare(D, Coverage({"": 10}, {("", "title"): 10}), THRESHOLDS)
    metrics.show(few)
    assert registry.get_sample_value(COVERAGE, labels) is None
    assert registry.get_sample_value(COVERAGE, {**labels, "pages": "all", "field": "title"}) == 1.0
    assert registry.get_sample_value(FLOOR, {**labels, "pages": "all", "field": "title"}) is None
    metrics.forget(D)
    assert registry.get_sample_value(COVERAGE, {**labels, "pages": "all", "field": "title"}) is None


def test_the_alert_rule_matches_the_gauges_labels() -> None:
    rules = yaml.safe_load((Path(__file__).parents[2] / "deploy" / "prometheus" / "alerts.yml").read_text())
    (rule,) = [r for g in rules["groups"] for r in g["rules"] if r["alert"] == "CrawlerFieldCoverageLow"]
    grouping = f"({', '.join(LABELS)})"
    assert rule["expr"].count(grouping) == 3, rule["expr"]
    assert COVERAGE in rule["expr"] and FLOOR in rule["expr"]
