"""The field language of domains.yaml on a fixture shop page: every rule kind and every type."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crawler.config import FieldRule
from crawler.parse.extract import compile_fields, extract
from crawler.parse.fields import missing_required

SHOP = (Path(__file__).parent / "pages" / "shop.html").read_bytes()
URL = "https://shop.test/product/lamp"


def field(rule: dict[str, Any] | str, body: bytes = SHOP) -> Any:
    fields = compile_fields({"f": FieldRule.model_validate(rule)})
    return extract(body, URL, fields=fields).data["f"]


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("h1", "Desk lamp"),  # the short form: the text of the first CSS match
        ({"css": "h1.name"}, "Desk lamp"),
        ({"xpath": "//p[@class='sku']"}, "SKU: L-42"),
        ({"xpath": "string(//h1)"}, "Desk lamp"),
        ({"xpath": "//meta[@name='description']/@content"}, "A lamp for desks."),
        ({"css": "meta[name=description]", "attr": "content"}, "A lamp for desks."),
        ({"css": ".missing"}, None),
        ({"css": ".missing", "default": "n/a"}, "n/a"),
        ({"css": ".missing", "all": True}, []),
        # attr: URLs made absolute against the page's <base href> (/catalog/).
        ({"css": "img.main", "attr": "src"}, "https://shop.test/catalog/img/lamp.jpg"),
        ({"css": "a.next", "attr": "href"}, "https://shop.test/catalog/?page=2"),
        ({"css": "span.stars", "attr": "data-rating"}, "5"),
        ({"css": "img.main", "attr": "alt"}, None),
        # all: every match, in document order, empty ones left out.
        ({"css": "ul.tags li", "all": True}, ["lighting", "desk", "home"]),
        (
            {"css": "img.thumb", "attr": "src", "all": True},
            ["https://shop.test/img/t1.jpg", "https://shop.test/catalog/t2.jpg"],
        ),
        # regex: the first group, or the whole match without a group; no match is no value.
        ({"css": ".sku", "regex": r"SKU:\s*(\S+)"}, "L-42"),
        ({"css": ".sku", "regex": r"L-\d+"}, "L-42"),
        ({"css": ".sku", "regex": r"EAN (\d+)"}, None),
        ({"css": "ul.tags li", "all": True, "regex": "^(.)"}, ["l", "d", "h"]),
        # types
        ({"css": ".price", "type": "price"}, 1299.0),
        ({"css": ".old-price", "type": "price"}, 1299.0),
        ({"css": ".nordic", "type": "price"}, 1299.0),
        ({"css": ".reviews-count", "type": "int"}, 1204),
        ({"css": ".weight", "type": "float"}, 2.5),
        ({"css": "span.stars", "attr": "data-rating", "type": "int"}, 5),
        ({"css": ".stock", "type": "bool"}, True),
        ({"css": "h1", "type": "bool"}, None),  # not a yes or no
        ({"css": "h1", "type": "int"}, None),  # not a number
        ({"css": "time.released", "type": "date"}, "2024-03-12"),
        ({"css": "time.released", "attr": "datetime", "type": "date"}, "2024-03-12T10:00:00+01:00"),
        ({"css": ".updated", "type": "date"}, "2024-03-12"),
        ({"css": ".updated", "type": "date", "format": "%m.%d.%Y"}, "2024-12-03"),  # month first
        ({"css": ".missing", "type": "int", "default": 0}, 0),
    ],
)
def test_rule_kinds_and_types(rule: dict[str, Any] | str, expected: Any) -> None:
    assert field(rule) == expected


def test_a_group_yields_each_repeated_block() -> None:
    rule = {
        "css": ".review",
        "all": True,
        "fields": {
            "author": ".author",
            "rating": {"css": ".stars", "attr": "data-rating", "type": "int"},
            "text": "p",
            "photo": {"css": "img", "attr": "src"},
        },
    }
    assert field(rule) == [
        {"author": "Ann", "rating": 5, "text": "Bright and steady.", "photo": None},
        {"author": "Bo", "rating": 3, "text": "Wobbles a bit.", "photo": None},
    ]
    # Without `all`, the first block alone; a group's XPath is relative to its block.
    rule = {"css": ".review", "fields": {"author": {"xpath": ".//span[@class='author']"}}}
    assert field(rule) == {"author": "Ann"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.299,00 €", 1299.0),
        ("$1,299.00", 1299.0),
        ("1 299 kr", 1299.0),
        ("1\u00a0299,50\u00a0€", 1299.5),
        ("CHF 1'299.50", 1299.5),
        ("£12.99", 12.99),
        ("12,99 €", 12.99),
        ("1,299", 1299.0),
        ("1.299.000 ₫", 1299000.0),
        ("EUR 0.5", 0.5),
        ("-3,20", -3.2),
        ("free", None),
    ],
)
def test_prices_in_any_locale(text: str, expected: float | None) -> None:
    assert field({"css": "p", "type": "price"}, f"<p>{text}</p>".encode()) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-03-12", "2024-03-12"),
        ("2024-03-12T08:30:00Z", "2024-03-12T08:30:00+00:00"),
        ("Tue, 12 Mar 2024 08:30:00 GMT", "2024-03-12T08:30:00+00:00"),
        ("March 12, 2024", "2024-03-12"),
        ("12 Mar 2024", "2024-03-12"),
        ("12/03/2024", "2024-03-12"),
        ("yesterday", None),
    ],
)
def test_dates_come_out_iso(text: str, expected: str | None) -> None:
    assert field({"css": "p", "type": "date"}, f"<p>{text}</p>".encode()) == expected


def test_required_fields_missing_are_named() -> None:
    fields = compile_fields(
        {
            "name": FieldRule(css="h1", required=True),
            "price": FieldRule(css=".nope", type="price", required=True),
            "tags": FieldRule(css=".nope", all=True, required=True),
            "note": FieldRule(css=".nope"),
        }
    )
    data = extract(SHOP, URL, fields=fields).data
    assert missing_required(fields, data) == ["price", "tags"]
    assert missing_required(fields, {**data, "price": 0.0, "tags": ["x"]}) == []


def test_fields_of_a_body_that_is_no_html_take_their_defaults() -> None:
    fields = compile_fields({"a": FieldRule(css="h1", default="x"), "b": FieldRule(css="h1")})
    assert extract(b"", URL, fields=fields).data == {"a": "x", "b": None}


def test_structured_data_on_request() -> None:
    page = extract(SHOP, URL, structured=["json-ld", "opengraph", "microdata"])
    structured = page.data["structured"]
    assert structured["json-ld"] == [
        {
            "@context": "https://schema.org",
            "@type": "Product",
            "name": "Desk lamp",
            "sku": "L-42",
            "offers": {"@type": "Offer", "price": "1299.00", "priceCurrency": "EUR"},
        }
    ]
    assert structured["opengraph"] == {
        "og:title": "Desk lamp",
        "og:image": "https://shop.test/img/lamp-1.jpg",
    }
    assert structured["microdata"][0]["type"] == "https://schema.org/Review"
    assert structured["microdata"][0]["properties"]["author"] == "Ann"
    assert "structured" not in extract(SHOP, URL).data  # nothing unless asked


def test_broken_json_ld_is_skipped_not_fatal() -> None:
    bad, good = '{"a": ', '[{"b": 1}]'
    body = (
        f'<script type="application/ld+json">{bad}</script><script type="application/ld+json">{good}</script>'
    )
    assert extract(body.encode(), URL, structured=["json-ld"]).data["structured"]["json-ld"] is None
