"""The `expect:` language: every kind of expectation reads, and each mistake is one line naming its key."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from crawler.errors import ConfigError
from crawler.quality.expect import DEFAULT_MAX_DROP, Expect, error_lines, load_expect, parse_bounds

WHERE = "domains.shop.test.expect"
RATE = "write a percentage (95%) or a fraction (0.95), above 0"

EVERY_KIND = """
fields:
  title: {present: true, type: str, length: "<= 200"}
  price: {present: 95%, type: float, range: "> 0, <= 10000"}
  rating: {range: between 0 and 5}
  sku: {pattern: '^[A-Z]{2}-\\d+$'}
  stock: {one_of: [in stock, out of stock]}
  images: {present: 0.8, type: list, length: ">= 1"}
schema:
  type: object
  required: [title]
  properties:
    price: {$ref: "#/$defs/amount"}
  $defs:
    amount: {type: number, minimum: 0}
min_items: 500
max_drop: 15%
min_sample: 50
pages:
  - name: product
    match: ^/product/
    min_items: 400
    fields:
      price: {present: true, range: "> 0"}
  - name: search
    match: ^/search
    schema: true
"""


def test_every_kind_of_expectation_reads() -> None:
    expect = load_expect(yaml.safe_load(EVERY_KIND), WHERE)
    title, price, rating = expect.fields["title"], expect.fields["price"], expect.fields["rating"]
    assert (title.present, title.type, title.length) == (True, "str", "<= 200")
    assert (price.present, price.type, price.range) == (0.95, "float", "> 0, <= 10000")
    assert rating.range == "between 0 and 5"
    assert expect.fields["sku"].pattern == r"^[A-Z]{2}-\d+$"
    assert expect.fields["stock"].one_of == ("in stock", "out of stock")
    assert expect.fields["images"].present == 0.8
    assert isinstance(expect.json_schema, dict) and expect.json_schema["required"] == ["title"]
    assert (expect.min_items, expect.max_drop, expect.min_sample) == (500, 0.15, 50)
    product, search = expect.pages
    assert (product.name, product.match, product.min_items) == ("product", "^/product/", 400)
    assert product.fields["price"].present is True and product.json_schema is None
    assert search.json_schema is True and "json_schema" in search.model_fields_set


def test_an_empty_section_has_the_defaults_and_max_drop_can_be_off() -> None:
    assert load_expect(None) == Expect()
    assert Expect().max_drop == DEFAULT_MAX_DROP
    assert load_expect({"max_drop": False}).max_drop is False  # YAML's `off`
    assert load_expect({"max_drop": "off"}).max_drop is False


def test_the_section_survives_the_configurations_merge_of_defaults() -> None:
    # domains.yaml's rules are a domain's settings dumped over the defaults' and validated again.
    for raw in (
        yaml.safe_load(EVERY_KIND),
        {"max_drop": "off", "pages": [{"name": "a", "match": "x", "schema": True}]},
    ):
        expect = load_expect(raw)
        again = Expect.model_validate(expect.model_dump(exclude_none=True))
        assert again == expect
        assert ["json_schema" in p.model_fields_set for p in again.pages] == [
            "json_schema" in p.model_fields_set for p in expect.pages
        ]


@pytest.mark.parametrize(
    ("text", "inside", "outside"),
    [
        ("> 0", [0.001, 5], [0, -1]),
        (">= 0", [0, 5], [-0.001]),
        ("< 10", [9.99, -5], [10]),
        ("<= 10", [10], [10.01]),
        ("between 1 and 5", [1, 3, 5], [0.99, 5.01]),
        ("> 0, <= 100", [0.5, 100], [0, 100.5]),
        (">0,<1", [0.5], [0, 1]),
        ("between 0 and 10, > 2", [2.5, 10], [2, 0]),
    ],
)
def test_comparisons(text: str, inside: list[float], outside: list[float]) -> None:
    bounds = parse_bounds(text)
    assert all(bounds.holds(x) for x in inside), text
    assert not any(bounds.holds(x) for x in outside), text
    assert not bounds.holds(math.nan)


def _error(raw: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        load_expect(raw, WHERE)
    return str(caught.value)


@pytest.mark.parametrize(
    ("raw", "line"),
    [
        (
            {"fields": {"price": {"range": "=> 0"}}},
            f"{WHERE}.fields.price.range: unknown comparison '=>'; use one of >, >=, <, <=, between",
        ),
        (
            {"fields": {"price": {"range": "0 < price"}}},
            f"{WHERE}.fields.price.range: '0 < price' has no comparison; use one of >, >=, <, <=, between",
        ),
        (
            {"fields": {"price": {"range": "> zero"}}},
            f"{WHERE}.fields.price.range: '> zero': 'zero' is not a number",
        ),
        ({"fields": {"price": {"range": "> 5, < 3"}}}, f"{WHERE}.fields.price.range: no number is > 5, < 3"),
        (
            {"fields": {"price": {"range": "between 5 and 1"}}},
            f"{WHERE}.fields.price.range: 'between 5 and 1': the first number must not be above the second",
        ),
        (
            {"fields": {"price": {"range": 0}}},
            f"{WHERE}.fields.price.range: "
            'write a comparison as text: "> 0", ">= 1, < 100" or "between 1 and 5"',
        ),
        (
            {"fields": {"price": {"present": 95}}},
            f"{WHERE}.fields.price.present: 95 is not a rate: {RATE}",
        ),
        (
            {"fields": {"price": {"present": "lots"}}},
            f"{WHERE}.fields.price.present: 'lots' is not a rate: {RATE}",
        ),
        (
            {"fields": {"sku": {"pattern": "[A-Z"}}},
            f"{WHERE}.fields.sku.pattern: '[A-Z' is not a regular expression "
            "(unterminated character set at position 0)",
        ),
        (
            {"fields": {"sku": {"type": "number"}}},
            f"{WHERE}.fields.sku.type: "
            "Input should be 'str', 'int', 'float', 'bool', 'date', 'list' or 'dict'",
        ),
        (
            {"fields": {"stock": {"one_of": []}}},
            f"{WHERE}.fields.stock.one_of: one_of takes a list of at least one value",
        ),
        (
            {"fields": {"stock": {"one_of": [["a"]]}}},
            f"{WHERE}.fields.stock.one_of: one_of takes text, numbers, true, false or null, not ['a']",
        ),
        (
            {"fields": {"sku": {"regex": "x"}}},
            f"{WHERE}.fields.sku.regex: unknown key; did you mean 'pattern'?",
        ),
        ({"feilds": {}}, f"{WHERE}.feilds: unknown key; did you mean 'fields'?"),
        (
            {"schema": {"type": "objekt"}},
            f"{WHERE}.schema: "
            "not a valid JSON Schema at $.type: 'objekt' is not valid under any of the given schemas",
        ),
        (
            {"schema": {"$ref": "https://example.com/product.json"}},
            f"{WHERE}.schema: $ref 'https://example.com/product.json': only references inside the schema "
            "(#/...) are read",
        ),
        (
            {"schema": {"$ref": "#/$defs/gone"}},
            f"{WHERE}.schema: $ref '#/$defs/gone' leads nowhere in the schema",
        ),
        ({"schema": ["object"]}, f"{WHERE}.schema: schema takes a JSON Schema: a mapping (or true)"),
        ({"min_items": 0}, f"{WHERE}.min_items: Input should be greater than or equal to 1"),
        (
            {"pages": [{"name": "a", "match": "^/a"}, {"name": "a", "match": "^/b"}]},
            f"{WHERE}: pages: two rules are named 'a'; give each its own name",
        ),
        (
            {"pages": [{"name": "product pages", "match": "^/p/"}]},
            f"{WHERE}.pages.0.name: 'product pages': a page rule's name is 1 to 40 letters, digits, - or _ "
            "(reports and metrics show it)",
        ),
        ({"pages": [{"name": "p"}]}, f"{WHERE}.pages.0.match: Field required"),
    ],
)
def test_a_mistake_is_one_line_naming_its_key(raw: Any, line: str) -> None:
    assert _error(raw) == line


def test_each_mistake_gets_its_own_line() -> None:
    lines = _error({"fields": {"a": {"range": "=> 1"}, "b": {"present": 2}}}).splitlines()
    assert [line.split(":")[0] for line in lines] == [f"{WHERE}.fields.a.range", f"{WHERE}.fields.b.present"]


class _Domain(BaseModel):
    """How domains.yaml will hold the section: a key of a domain's rules."""

    model_config = ConfigDict(extra="forbid")
    expect: Expect | None = None


def test_a_configuration_that_embeds_the_section_names_the_whole_path() -> None:
    class _Config(BaseModel):
        domains: dict[str, _Domain]

    raw = yaml.safe_load(
        'domains:\n  shop.test:\n    expect:\n      fields:\n        price: {range: "=> 0"}\n'
    )
    with pytest.raises(ValidationError) as caught:
        _Config.model_validate(raw)
    assert error_lines(caught.value, "config.yaml") == [
        "config.yaml.domains.shop.test.expect.fields.price.range: "
        "unknown comparison '=>'; use one of >, >=, <, <=, between"
    ]
    good = _Config.model_validate(yaml.safe_load("domains:\n  shop.test:\n    expect: {min_items: 3}\n"))
    assert good.domains["shop.test"].expect == Expect(min_items=3)


def test_the_example_in_the_docs_loads() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "quality.md").read_text()
    example = yaml.safe_load(doc.split("```yaml\n", 1)[1].split("```", 1)[0])
    expect = load_expect(example["domains"]["shop.test"]["expect"], WHERE)
    assert expect.pages[0].fields["price"].range == "> 0, <= 10000"
    assert expect.fields["images"].present == 0.8
