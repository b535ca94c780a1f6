"""A quick pass of a JSON Schema's common keywords: data it lets through is valid, so jsonschema (~30 µs
a page) runs only on the data it does not, to say what is wrong."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Passes = Callable[[Any], bool]
"""True only if jsonschema finds the value valid; False says nothing (jsonschema decides)."""

# Keywords that assert nothing.
_NOTES = frozenset(
    {
        "$schema",
        "$comment",
        "title",
        "description",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
    }
)
# JSON's types by the exact class of a value: a value of any other class (a subclass, a Decimal)
# passes nothing here and is left to jsonschema.
_PLAIN = frozenset({dict, list, str, int, float, bool, type(None)})
_NUMBER: frozenset[Any] = frozenset({int, float})  # bool is a class of its own: no number
_TYPES: dict[str, frozenset[type]] = {
    "object": frozenset({dict}),
    "array": frozenset({list}),
    "string": frozenset({str}),
    "number": _NUMBER,
    "integer": frozenset({int}),  # and a float with no fraction, below
    "boolean": frozenset({bool}),
    "null": frozenset({type(None)}),
}


def quick_pass(schema: Any) -> Passes | None:
    """The quick pass of a Draft 2020-12 schema, or None if it asks for anything else (a format, a
    $ref, a combinator, ...): such a schema is jsonschema's alone."""
    if schema is True:
        return _always
    if not isinstance(schema, dict):
        return None
    tests: list[Passes] = []
    for key, value in schema.items():
        if key in _NOTES:
            continue
        test = _keyword(key, value, schema)
        if test is None:
            return None
        if test is not _always:
            tests.append(test)
    if not tests:
        return _always
    if len(tests) == 1:
        return tests[0]
    every = tuple(tests)

    def passes(v: Any) -> bool:
        for test in every:  # noqa: SIM110 (a loop: no generator made per page)
            if not test(v):
                return False
        return True

    return passes


def _always(value: Any) -> bool:
    return True


def _keyword(key: str, value: Any, schema: Mapping[str, Any]) -> Passes | None:
    # A keyword asserts about values of one JSON type; a value of another passes it, as in jsonschema.
    if key == "type":
        return _type(value)
    if key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        return _bound(key, value) if value.__class__ in _NUMBER else None
    if key in ("minLength", "maxLength", "minItems", "maxItems"):
        return _size(key, value) if value.__class__ is int else None
    if key == "pattern":
        return _pattern(value) if value.__class__ is str else None
    if key == "required":
        return _required(value) if value.__class__ is list else None
    if key == "properties":
        return _properties(value) if value.__class__ is dict else None
    if key == "additionalProperties":
        return _additional(value, schema)
    if key == "items":
        return None if "prefixItems" in schema else _items(value)
    if key == "enum":
        return _enum(value) if value.__class__ is list else None
    return None


def _type(value: Any) -> Passes | None:
    names = [value] if value.__class__ is str else value
    if names.__class__ is not list or not all(n in _TYPES for n in names):
        return None
    classes = frozenset(c for n in names for c in _TYPES[n])
    if "integer" in names and "number" not in names:
        return lambda v: v.__class__ in classes or (v.__class__ is float and v.is_integer())
    return lambda v: v.__class__ in classes


def _bound(key: str, limit: float) -> Passes:
    # jsonschema fails a number on `x < minimum` (and so on): the negations let NaN through, as it does.
    others = _PLAIN - _NUMBER
    if key == "minimum":
        return lambda v: not v < limit if v.__class__ in _NUMBER else v.__class__ in others
    if key == "maximum":
        return lambda v: not v > limit if v.__class__ in _NUMBER else v.__class__ in others
    if key == "exclusiveMinimum":
        return lambda v: not v <= limit if v.__class__ in _NUMBER else v.__class__ in others
    return lambda v: not v >= limit if v.__class__ in _NUMBER else v.__class__ in others


def _size(key: str, n: int) -> Passes:
    of = str if key.endswith("Length") else list
    others = _PLAIN - {of}
    if key.startswith("min"):
        return lambda v: len(v) >= n if v.__class__ is of else v.__class__ in others
    return lambda v: len(v) <= n if v.__class__ is of else v.__class__ in others


def _pattern(pattern: str) -> Passes | None:
    try:
        search = re.compile(pattern).search
    except re.error:
        return None
    others = _PLAIN - {str}
    return lambda v: search(v) is not None if v.__class__ is str else v.__class__ in others


_NOT_OBJECT = _PLAIN - {dict}
_NOT_ARRAY = _PLAIN - {list}


def _required(names: list[Any]) -> Passes:
    wanted = tuple(names)
    return lambda v: all(n in v for n in wanted) if v.__class__ is dict else v.__class__ in _NOT_OBJECT


def _properties(schemas: dict[str, Any]) -> Passes | None:
    tests = []
    for name, schema in schemas.items():
        test = quick_pass(schema)
        if test is None:
            return None
        if test is not _always:
            tests.append((name, test))
    pairs = tuple(tests)

    def passes(v: Any) -> bool:
        if v.__class__ is not dict:
            return v.__class__ in _NOT_OBJECT
        for name, test in pairs:  # noqa: SIM110 (a loop: no generator made per page)
            if name in v and not test(v[name]):
                return False
        return True

    return passes


def _additional(schema: Any, parent: Mapping[str, Any]) -> Passes | None:
    properties = parent.get("properties", {})
    if "patternProperties" in parent or properties.__class__ is not dict:
        return None
    known = frozenset(properties)
    if schema is False:
        return lambda v: known.issuperset(v) if v.__class__ is dict else v.__class__ in _NOT_OBJECT
    test = quick_pass(schema)
    if test is None:
        return None
    return lambda v: (
        all(test(v[k]) for k in v if k not in known) if v.__class__ is dict else v.__class__ in _NOT_OBJECT
    )


def _items(schema: Any) -> Passes | None:
    if schema is False:
        return lambda v: not v if v.__class__ is list else v.__class__ in _NOT_ARRAY
    test = quick_pass(schema)
    if test is None:
        return None
    return lambda v: all(test(i) for i in v) if v.__class__ is list else v.__class__ in _NOT_ARRAY


def _enum(values: list[Any]) -> Passes:
    # Text only: jsonschema's equality of numbers, bools and containers is its own.
    texts = frozenset(v for v in values if v.__class__ is str)
    return lambda v: v.__class__ is str and v in texts
