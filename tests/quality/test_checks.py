"""One page's data against its domain's expectations: what fails, named and explained, and the
quality kinds it counts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.quality.checks import Expectations, expectation_names
from crawler.quality.coverage import Coverage, Tally, coverage_of
from crawler.quality.expect import load_expect

URL = "http://shop.test/"


def _failures(expect: dict[str, Any], data: dict[str, Any], url: str = URL) -> dict[str, str]:
    verdict = Expectations(load_expect(expect)).check(url, data)
    return {f.name: f.reason for f in verdict.failures}


@pytest.mark.parametrize(
    ("spec", "good", "bad", "reason"),
    [
        ({"present": True}, "Lamp", None, "title is missing"),
        ({"present": True}, 0, "", "title is missing"),
        ({"present": True}, [0], [], "title is missing"),
        ({"type": "str"}, "Lamp", 12, "title is 12 (int), not str"),
        ({"type": "int"}, 12, 12.5, "title is 12.5 (float), not int"),
        ({"type": "int"}, 3, True, "title is true (bool), not int"),
        ({"type": "float"}, 12, "12", "title is '12' (str), not float"),
        ({"type": "bool"}, False, "no", "title is 'no' (str), not bool"),
        ({"type": "date"}, "2024-05-01", "May 1st", "title is 'May 1st' (str), not date"),
        (
            {"type": "date"},
            "2024-05-01T10:00:00+02:00",
            "2024-13-01",
            "title is '2024-13-01' (str), not date",
        ),
        ({"type": "list"}, ["a"], "a", "title is 'a' (str), not list"),
        ({"type": "dict"}, [{"a": 1}], [{"a": 1}, "a"], "title[1] is 'a' (str), not dict"),
        ({"type": "str"}, ["a", "b"], ["a", 2], "title[1] is 2 (int), not str"),
        ({"range": "> 0"}, 0.5, -3.0, "title is -3.0, not > 0"),
        ({"range": "> 0"}, 1, "12 EUR", "title is '12 EUR', not a number"),
        ({"range": "between 1 and 5"}, [1, 5], [3, 6], "title[1] is 6, not between 1 and 5"),
        ({"length": ">= 3"}, "abc", "ab", "title has 2 characters, not >= 3"),
        ({"length": "<= 2"}, ["a", "b"], ["a", "b", "c"], "title has 3 items, not <= 2"),
        ({"length": ">= 1"}, "a", 5, "title is 5, which has no length"),
        ({"pattern": r"^[A-Z]{2}-\d+$"}, "LA-42", "la-42", r"title 'la-42' does not match '^[A-Z]{2}-\\d+$'"),
        ({"pattern": r"^\d+$"}, 1234, {"a": 1}, "title is {'a': 1}, not text"),
        (
            {"one_of": ["in stock", "out of stock"]},
            "in stock",
            "maybe",
            "title is 'maybe', not one of 'in stock', 'out of stock'",
        ),
        ({"one_of": [1, 2]}, 2, True, "title is true, not one of 1, 2"),
        ({"one_of": [True]}, True, 1, "title is 1, not one of true"),
        ({"one_of": ["a"]}, ["a", "a"], ["a", ["b"]], "title[1] is ['b'], not one of 'a'"),
    ],
)
def test_each_kind_passes_and_fails(spec: dict[str, Any], good: Any, bad: Any, reason: str) -> None:
    expect = {"fields": {"title": spec}}
    what = next(iter(spec))
    assert _failures(expect, {"title": good}) == {}
    assert _failures(expect, {"title": bad}) == {f"title.{what}": reason}


def test_a_value_check_passes_a_missing_value_which_presence_is_for() -> None:
    expect = {
        "fields": {"price": {"type": "float", "range": "> 0", "pattern": "x", "one_of": [1], "length": "> 3"}}
    }
    assert _failures(expect, {}) == {}
    assert _failures(expect, {"price": None}) == {}
    assert _failures({"fields": {"price": {"present": True, "range": "> 0"}}}, {}) == {
        "price.present": "price is missing"
    }


def test_a_fill_rate_fails_no_page() -> None:
    plan = Expectations(load_expect({"fields": {"price": {"present": "95%"}}}))
    verdict = plan.check(URL, {"price": None})
    assert verdict.ok and verdict.failures == ()
    assert verdict.kinds == ("q:items",)


def test_the_schema_checks_the_whole_data_with_formats() -> None:
    expect = {
        "schema": {
            "type": "object",
            "required": ["title", "price"],
            "properties": {"price": {"type": "number", "minimum": 0}, "seen": {"format": "date"}},
        }
    }
    assert _failures(expect, {"title": "a", "price": 3}) == {}
    assert _failures(expect, {"title": "a"}) == {"schema": "schema at $: 'price' is a required property"}
    assert _failures(expect, {"title": "a", "price": -1}) == {
        "schema": "schema at $.price: -1 is less than the minimum of 0"
    }
    assert _failures(expect, {"title": "a", "price": 1, "seen": "yesterday"}) == {
        "schema": "schema at $.seen: 'yesterday' is not a 'date'"
    }


EXPECT = {
    "fields": {"title": {"present": True}, "price": {"range": "> 0"}},
    "schema": {"type": "object", "properties": {"title": {"type": "string"}}},
    "pages": [
        {
            "name": "product",
            "match": "^/product/",
            "fields": {"price": {"present": True, "range": "between 1 and 1000"}},
        },
        {"name": "search", "match": r"\?q=", "schema": True, "fields": {"title": {}}},
    ],
}


def test_a_page_rule_takes_its_pages_and_replaces_the_fields_it_names() -> None:
    plan = Expectations(load_expect(EXPECT), fields=["title", "price", "sku"])
    product = plan.check("http://shop.test/product/1", {"title": None, "price": 0.5})
    assert product.page_rule == "product"
    assert {f.name: f.reason for f in product.failures} == {
        "title.present": "title is missing",  # the domain's, kept: the rule does not name title
        "product/price.range": "price is 0.5, not between 1 and 1000",
        "schema": "schema at $.title: None is not of type 'string'",
    }
    # The first rule that matches; its schema: true sets the domain's aside; title: {} drops its checks.
    search = plan.check("http://shop.test/product/list?q=lamp", {"price": -1})
    assert search.page_rule == "product"
    search = plan.check("http://shop.test/find?q=lamp", {"price": -1})
    assert search.page_rule == "search"
    assert [f.name for f in search.failures] == ["price.range"]
    home = plan.check("http://shop.test/", {"title": "Shop", "price": 0.5})
    assert home.page_rule is None and home.ok


def test_the_kinds_a_page_counts() -> None:
    plan = Expectations(load_expect(EXPECT), fields=["title", "price", "sku"])
    verdict = plan.check("http://shop.test/product/1", {"title": "Lamp", "price": 0, "sku": ""})
    assert verdict.kinds == (
        "q:items",
        "q:items:product",
        "q:fill:title",
        "q:fill:product/title",
        "q:fill:price",
        "q:fill:product/price",
        "q:fail:product/price.range",
        "q:invalid",
    )
    assert verdict.counts("shop.test") == {("shop.test", kind): 1 for kind in verdict.kinds}
    assert verdict.listed() == [
        {"name": "product/price.range", "reason": "price is 0, not between 1 and 1000"}
    ]


def test_expectation_names_are_those_pages_fail_under() -> None:
    expect = load_expect(EXPECT)
    assert expectation_names(expect) == (
        "title.present",
        "price.range",
        "schema",
        "product/price.present",
        "product/price.range",
    )
    plan = Expectations(expect)
    failed = plan.check("http://shop.test/product/1", {"price": -5}).failures
    assert {f.name for f in failed} <= set(expectation_names(expect))


_names = st.text(min_size=1, max_size=12)


@given(fields=st.lists(_names, min_size=1, max_size=5, unique=True), present=st.data())
def test_any_field_name_counts_and_reads_back(fields: list[str], present: st.DataObject) -> None:
    # The counts hash splits `domain kind` at its last space: no kind may hold one, and each field's
    # name must come back as it was, on every page and on a page rule's pages.
    expect = load_expect({"pages": [{"name": "p", "match": "^/p/"}]})
    plan = Expectations(expect, fields=fields)
    tally = Tally()
    data = {name: present.draw(st.sampled_from(["x", None])) for name in fields}
    verdict = plan.check("http://shop.test/p/1", data)
    assert not any(c.isspace() for kind in verdict.kinds for c in kind)
    tally.add("shop.test", verdict.kinds)
    coverage = tally.coverage()["shop.test"]
    for name in fields:
        filled = 1 if data[name] == "x" else 0
        assert coverage.fill("", name).n == coverage.fill("p", name).n == filled, name
    assert coverage_of({"shop.test": coverage.kinds()}) == {"shop.test": coverage}
    assert Coverage.of({**coverage.kinds(), "ok": 5, "routed": 9}) == coverage


def test_a_reason_quotes_a_long_value_cut_short() -> None:
    reasons = _failures({"fields": {"body": {"pattern": "^x"}}}, {"body": "lorem " * 2000})
    assert len(reasons["body.pattern"]) < 120 and reasons["body.pattern"].startswith("body 'lorem lorem")
    many = _failures({"fields": {"tags": {"type": "dict"}}}, {"tags": [[str(i) * 500 for i in range(1000)]]})
    assert len(many["tags.type"]) < 120
