"""A crawl's coverage held to its expectations and to the domain's last finished crawl: which alerts,
on how many pages, and the floor each rate alerts under."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from crawler.quality.compare import Thresholds, baselines, compare, last_finished
from crawler.quality.coverage import Coverage
from crawler.quality.expect import load_expect
from crawler.sink.crawls import CrawlRecord

D = "shop.test"


def _coverage(
    pages: int, filled: dict[str, int], failed: dict[str, int] | None = None, rule: str = ""
) -> Coverage:
    items = {"": pages, rule: pages} if rule else {"": pages}
    fills = {(scope, name): n for name, n in filled.items() for scope in {"", rule}}
    return Coverage(items, fills, failed or {}, sum((failed or {}).values()))


def _thresholds(expect: dict[str, Any], fields: tuple[str, ...] = ("title", "price")) -> Thresholds:
    return Thresholds.of(load_expect(expect), fields)


def _alerts(quality: Any) -> set[tuple[str, str, str]]:
    return {(a.kind, a.page_rule, a.subject) for a in quality.alerts}


def test_a_fill_rate_below_its_expectation_alerts_once_enough_pages_are_read() -> None:
    thresholds = _thresholds({"fields": {"price": {"present": "95%"}}, "min_sample": 50})
    few = compare(D, _coverage(40, {"title": 40, "price": 10}), thresholds)
    assert few.alerts == () and all(row.floor is None for row in few.fields)
    quality = compare(D, _coverage(100, {"title": 100, "price": 90}), thresholds)
    assert _alerts(quality) == {("below_expected", "", "price")}
    (alert,) = quality.alerts
    assert alert.message == "price: on 90.0% of shop.test's pages, below the 95.0% expected"
    price = next(r for r in quality.fields if r.field == "price")
    assert (price.now.rate, price.expected, price.floor, price.alerts) == (
        0.9,
        0.95,
        0.95,
        ("below_expected",),
    )
    assert compare(D, _coverage(100, {"title": 100, "price": 95}), thresholds).alerts == ()


def test_a_fill_rate_more_than_max_drop_below_the_last_crawls_alerts() -> None:
    thresholds = _thresholds({"max_drop": "10%"})
    last = _coverage(500, {"title": 500, "price": 490})  # 98 %
    held = compare(D, _coverage(300, {"title": 300, "price": 265}), thresholds, last, baseline="c1")
    assert held.alerts == () and held.baseline == "c1"
    price = next(r for r in held.fields if r.field == "price")
    assert price.floor == pytest.approx(0.88) and price.before is not None and price.before.rate == 0.98
    broke = compare(D, _coverage(300, {"title": 300, "price": 9}), thresholds, last)
    assert _alerts(broke) == {("dropped", "", "price")}
    assert broke.alerts[0].message == "price: on 3.0% of shop.test's pages, down from 98.0% in the last crawl"
    # Off: no comparison with the last crawl (and no floor from it).
    off = compare(D, _coverage(300, {"title": 300, "price": 9}), _thresholds({"max_drop": "off"}), last)
    assert off.alerts == () and all(r.floor is None for r in off.fields)


def test_a_last_crawl_too_small_to_judge_is_no_baseline() -> None:
    thresholds = _thresholds({"min_sample": 30})
    quality = compare(D, _coverage(100, {"title": 100, "price": 0}), thresholds, _coverage(5, {"price": 5}))
    assert quality.alerts == ()


def test_the_higher_floor_wins() -> None:
    thresholds = _thresholds({"fields": {"price": {"present": "80%"}}, "max_drop": "5%"})
    quality = compare(D, _coverage(100, {"price": 93}), thresholds, _coverage(100, {"price": 99}))
    price = next(r for r in quality.fields if r.field == "price")
    assert price.floor == pytest.approx(0.94) and price.alerts == ("dropped",)


def test_page_rules_have_their_own_rows_and_expectations() -> None:
    expect = {"pages": [{"name": "product", "match": "^/p/", "fields": {"price": {"present": "95%"}}}]}
    now = Coverage({"": 200, "product": 100}, {("", "price"): 60, ("product", "price"): 60}, {}, 0)
    quality = compare(D, now, _thresholds(expect))
    assert [(r.page_rule, r.field) for r in quality.fields] == [
        ("", "title"),
        ("", "price"),
        ("product", "title"),
        ("product", "price"),
    ]
    assert _alerts(quality) == {("below_expected", "product", "price")}
    assert (
        quality.alerts[0].message
        == "product/price: on 60.0% of shop.test's 'product' pages, below the 95.0% expected"
    )


def test_min_items_is_judged_when_the_crawl_has_finished() -> None:
    expect = {"min_items": 500, "pages": [{"name": "product", "match": "^/p/", "min_items": 100}]}
    now = Coverage({"": 450, "product": 120}, {}, {}, 0)
    assert compare(D, now, _thresholds(expect)).alerts == ()
    quality = compare(D, now, _thresholds(expect), finished=True)
    assert _alerts(quality) == {("too_few", "", "items")}
    assert quality.alerts[0].message == "shop.test: 450 items, fewer than the 500 expected"
    assert [(r.page_rule, r.now, r.minimum) for r in quality.items] == [("", 450, 500), ("product", 120, 100)]


def test_a_page_expectation_failing_on_many_pages_alerts() -> None:
    expect = {"fields": {"price": {"range": "> 0"}, "title": {"present": True}}, "max_drop": "10%"}
    thresholds = _thresholds(expect)
    assert thresholds.expectations == ("price.range", "title.present")
    few = compare(D, _coverage(100, {"price": 100}, {"price.range": 10}), thresholds)
    assert few.alerts == ()  # 10 %: within max_drop of none failing
    many = compare(D, _coverage(100, {"price": 100}, {"price.range": 30}), thresholds)
    assert _alerts(many) == {("failing", "", "price.range")}
    assert many.alerts[0].message == "price.range: failed on 30.0% of shop.test's pages (30)"
    # Against a last crawl where 25 % failed already, 30 % is no news.
    usual = compare(
        D,
        _coverage(100, {"price": 100}, {"price.range": 30}),
        thresholds,
        _coverage(100, {}, {"price.range": 25}),
    )
    assert usual.alerts == ()
    rows = {r.name: r for r in many.expectations}
    assert rows["title.present"].now.n == 0 and rows["price.range"].now.n == 30


def test_an_expectation_no_longer_configured_still_shows() -> None:
    quality = compare(D, _coverage(10, {}, {"sku.pattern": 2}), _thresholds({}))
    assert [r.name for r in quality.expectations] == ["sku.pattern"]


def test_the_baseline_is_the_domains_last_finished_crawl() -> None:
    def crawl(id_: str, state: str, hour: int | None, pages: int) -> CrawlRecord:
        counts = {D: {"ok": pages, "q:items": pages}} if pages else {D: {"ok": 3}}
        finished = datetime(2026, 12, 1, hour, tzinfo=UTC) if hour is not None else None
        return CrawlRecord(id_, None, state, [], {}, datetime(2026, 12, 1, tzinfo=UTC), finished, counts)  # type: ignore[arg-type]

    crawls = [
        crawl("c1", "finished", 1, 100),
        crawl("c2", "finished", 3, 100),
        crawl("c3", "cancelled", 4, 100),  # cancelled: no baseline
        crawl("c4", "finished", 5, 0),  # checked no page of the domain (its counts predate expect:)
        crawl("c5", "running", None, 100),
    ]
    found = last_finished(crawls, D, besides="c5")
    assert found is not None and found.id == "c2"
    assert last_finished(crawls, D, besides="c2") is crawls[0]
    assert last_finished(crawls, "other.test") is None


def test_the_baselines_of_many_domains_are_each_ones_last_finished_crawl() -> None:
    def crawl(id_: str, state: str, hour: int, domains: dict[str, int]) -> CrawlRecord:
        counts = {d: ({"ok": n, "q:items": n} if n else {"ok": 1}) for d, n in domains.items()}
        finished = datetime(2026, 12, 1, hour, tzinfo=UTC)
        return CrawlRecord(id_, None, state, [], {}, datetime(2026, 12, 1, tzinfo=UTC), finished, counts)  # type: ignore[arg-type]

    domains = [f"d{i}.test" for i in range(6)]
    crawls = [
        crawl("c1", "finished", 1, {d: 10 for d in domains}),
        crawl("c2", "finished", 4, {"d0.test": 5, "d1.test": 0, "d2.test": 7}),
        crawl("c3", "cancelled", 6, {d: 9 for d in domains}),
        crawl("c4", "finished", 3, {"d2.test": 8, "d3.test": 2}),
        crawl("c5", "finished", 4, {"d0.test": 6}),  # as late as c2, listed after it: c2 is kept
        crawl("c6", "finished", 8, {"d4.test": 3}),  # the one judged
    ]
    found = baselines(crawls, [*domains, "other.test"], besides="c6")
    assert {d: c.id for d, (c, _) in found.items()} == {
        "d0.test": "c2",
        "d1.test": "c1",  # c2 checked none of its pages
        "d2.test": "c2",
        "d3.test": "c4",
        "d4.test": "c1",
        "d5.test": "c1",
    }
    assert found["d2.test"][1].pages() == 7
    for d in domains:
        assert last_finished(crawls, d, besides="c6") is found[d][0]
