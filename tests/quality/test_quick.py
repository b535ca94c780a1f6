"""The quick passes before jsonschema and before each field check: what they let through, the full
check finds nothing wrong with; on plain data they miss nothing the full check lets through."""

from __future__ import annotations

import decimal
import enum
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator, FormatChecker

from crawler.quality.checks import _passes, _test, asked
from crawler.quality.expect import FieldExpect
from crawler.quality.quick import quick_pass


class Level(enum.IntEnum):
    LOW = 1


class Text(str):
    pass


_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 200_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 2.5, -0.0, 100000.0]),
    st.text(max_size=6),
    st.sampled_from(["EUR", "USD", "", "http://a/", "x" * 201]),
)
# Values no JSON parser makes, which jsonschema still judges: the quick passes leave them to it.
_odd = st.sampled_from([Level.LOW, decimal.Decimal("-1"), Text("EUR"), Text("")])
_values = st.recursive(
    st.one_of(_scalars, _odd),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["name", "price", "links", "x"]), inner, max_size=4),
    ),
    max_leaves=12,
)

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "required": ["name", "price"],
        "properties": {"price": {"type": "number", "minimum": 0}, "links": {"type": "array"}},
    },
    {"type": ["integer", "null"], "exclusiveMinimum": 0, "maximum": 100000},
    {"type": "integer"},
    {"type": "number", "exclusiveMaximum": 10, "minimum": -1.5},
    {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[A-Z]+$"},
    {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": ["string", "boolean"]}},
    {"items": False},
    {"enum": ["EUR", "USD"]},
    {"title": "t", "description": "d", "properties": {"name": True, "x": {"type": "null"}}},
    {"properties": {"name": {"type": "string"}}, "additionalProperties": False},
    {"properties": {"name": {}}, "additionalProperties": {"type": "number"}},
    {"type": "object", "properties": {"links": {"items": {"pattern": "^https?://"}}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
@settings(max_examples=300)
@given(value=_values)
def test_the_quick_pass_of_a_schema_passes_only_valid_data(schema: dict[str, Any], value: Any) -> None:
    quick = quick_pass(schema)
    assert quick is not None
    valid = Draft202012Validator(schema, format_checker=FormatChecker()).is_valid(value)
    if quick(value):
        assert valid
    elif _plain(value) and not _numeric_enum(schema):
        assert not valid


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "format": "date"},
        {"$ref": "#/$defs/a", "$defs": {"a": {}}},
        {"anyOf": [{"type": "string"}]},
        {"prefixItems": [{}], "items": False},
        {"patternProperties": {"^a": {}}, "additionalProperties": False},
        {"properties": {"a": {"const": 1}}},
        {"type": "strin"},
        False,
    ],
)
def test_a_schema_asking_for_more_is_left_to_jsonschema(schema: Any) -> None:
    assert quick_pass(schema) is None


def test_a_schema_of_notes_alone_passes_everything() -> None:
    quick = quick_pass({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "t"})
    assert quick is not None and quick(object())


SPECS: list[dict[str, Any]] = [
    {"present": True},
    {"type": "str"},
    {"type": "int"},
    {"type": "float"},
    {"type": "bool"},
    {"type": "date"},
    {"type": "list"},
    {"type": "dict"},
    {"range": "> 0, < 100000"},
    {"range": "between -1 and 2.5"},
    {"range": ">= 0"},
    {"length": "<= 200"},
    {"length": ">= 1, < 4"},
    {"pattern": "^https?://"},
    {"one_of": ["EUR", "USD", 1, True, None, 2.5]},
]


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=300)
@given(value=st.one_of(_values, st.sampled_from(["2024-05-01", "2024-13-01", "EUR", 1, True, 2.5])))
def test_the_quick_pass_of_a_field_check_passes_only_what_it_passes(spec: dict[str, Any], value: Any) -> None:
    expect = FieldExpect.model_validate(spec)
    (what,) = asked(expect)
    if _passes(what, expect)(value):
        assert _test(what, expect)(value) is None


def _plain(value: Any) -> bool:
    if value.__class__ in (dict,):
        return all(_plain(v) for v in value.values())
    if value.__class__ is list:
        return all(_plain(v) for v in value)
    return value.__class__ in (str, int, float, bool, type(None))


def _numeric_enum(schema: dict[str, Any]) -> bool:
    return any(v.__class__ is not str for v in schema.get("enum", ()))
