"""A domain's expectations compiled once per configuration, run against one page's data: the
expectations it failed, and the quality counts it adds to its crawl's."""

from __future__ import annotations

import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from jsonschema import FormatChecker
from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for

from crawler.quality.coverage import INVALID, fail_kind, fill_kind, items_kind, subject
from crawler.quality.expect import Bounds, Expect, FieldExpect, parse_bounds, tracked_fields
from crawler.quality.quick import Passes, quick_pass

SHOWN = 60  # characters of a value a reason quotes

Test = Callable[[Any], str | None]
"""A value's check: None if it passes, else why not (after the field's name)."""


@dataclass(frozen=True, slots=True)
class Failed:
    """An expectation a page failed: its name (`price.range`, `product/price.present`, `schema`) and
    why, in words (`price is -3.0, not > 0`)."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """What checking one page's data found: the expectations it failed, the quality kinds it adds one
    to in its crawl's counts, and the page rule it fell under (None: the domain's own)."""

    failures: tuple[Failed, ...]
    kinds: tuple[str, ...]
    page_rule: str | None = None

    @property
    def ok(self) -> bool:
        """True if the page met every expectation of its own (fill rates are the crawl's to meet)."""
        return not self.failures

    def listed(self) -> list[dict[str, str]]:
        """The failures as the page's row and `crawler export --invalid` list them: name and reason."""
        return [{"name": f.name, "reason": f.reason} for f in self.failures]

    def counts(self, domain: str) -> dict[tuple[str, str], int]:
        """This page's additions to its crawl's counts, keyed (domain, kind) as CrawlState.count and
        Settling.ack take them: merged with the page's outcome, they are written in one step."""
        return {(domain, kind): 1 for kind in self.kinds}


@dataclass(frozen=True, slots=True)
class _Check:
    name: str
    kind: str
    field: str
    test: Test
    passes: Passes  # True only if `test` finds nothing: the quick way past a good value


@dataclass(frozen=True, slots=True)
class _Schema:
    name: str
    kind: str
    validator: Validator
    quick: Passes | None  # None: every page is jsonschema's


@dataclass(frozen=True, slots=True)
class _Scope:
    """What runs on the pages of one page rule ("" for pages no rule takes)."""

    rule: str
    checks: tuple[_Check, ...]
    schema: _Schema | None
    items: tuple[str, ...]  # the kinds a page checked adds to
    fills: tuple[tuple[str, tuple[str, ...]], ...]  # (field, the kinds a page with it adds to)


class Expectations:
    """One domain's expectations, compiled once per configuration; `check` runs once per page.

    `fields` are the domain's `extract` fields: each one's fill rate is counted, expected or not.
    """

    def __init__(self, expect: Expect | None = None, fields: Iterable[str] = ()) -> None:
        self.expect = expect if expect is not None else Expect()
        self.fields = tracked_fields(self.expect, fields)
        domain = self.expect
        own = {name: _field_checks("", name, spec) for name, spec in domain.fields.items()}
        schema = _schema_check("", domain.json_schema)
        self._all = _Scope("", _flat(own.values()), schema, (items_kind(),), self._fills(""))
        rules = []
        for rule in domain.pages:
            checks = {**own, **{n: _field_checks(rule.name, n, s) for n, s in rule.fields.items()}}
            ruled = (
                _schema_check(rule.name, rule.json_schema)
                if "json_schema" in rule.model_fields_set
                else schema
            )
            items = (items_kind(), items_kind(rule.name))
            scope = _Scope(rule.name, _flat(checks.values()), ruled, items, self._fills(rule.name))
            rules.append((re.compile(rule.match), scope))
        self._rules = tuple(rules)

    def _fills(self, rule: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """Each field, and the kinds a page with a value of it adds to: on every page, and its rule's."""
        return tuple(
            (name, (fill_kind("", name), fill_kind(rule, name)) if rule else (fill_kind("", name),))
            for name in self.fields
        )

    def check(self, url: str, data: Mapping[str, Any]) -> Verdict:
        """Check the data extracted from the page at `url`.

        A page with failures is invalid: it is stored all the same, with its failures listed, and
        counted (Verdict.counts); it is not retried, since fetching it again does not mend its markup.
        Check every page whose extraction ran; a page's fill counts go with it whether or not it failed.
        """
        scope = self._scope_of(url)
        kinds = list(scope.items)
        for name, fill in scope.fills:
            value = data.get(name)
            if not (value is None or (value.__class__ in _EMPTIABLE and not value)):
                kinds += fill
        failures = []
        for check in scope.checks:
            value = data.get(check.field)
            if check.passes(value):
                continue
            reason = check.test(value)
            if reason is not None:
                failures.append(Failed(check.name, reason))
                kinds.append(check.kind)
        schema = scope.schema
        if schema is not None and (schema.quick is None or not schema.quick(data)):
            error = best_match(schema.validator.iter_errors(data))
            if error is not None:
                reason = f"schema at {error.json_path}: {_clip(error.message, 200)}"
                failures.append(Failed(schema.name, reason))
                kinds.append(schema.kind)
        if failures:
            kinds.append(INVALID)
        return Verdict(tuple(failures), tuple(kinds), scope.rule or None)

    def _scope_of(self, url: str) -> _Scope:
        if self._rules:
            try:
                parts = urlsplit(url)
            except ValueError:
                return self._all
            target = parts.path + ("?" + parts.query if parts.query else "")
            for pattern, scope in self._rules:
                if pattern.search(target):
                    return scope
        return self._all


_EMPTIABLE = (str, list, dict)


def missing(value: Any) -> bool:
    """Whether a field has no value: None, or empty text, list or object."""
    return value is None or (value.__class__ in _EMPTIABLE and not value)


def _flat(groups: Iterable[tuple[_Check, ...]]) -> tuple[_Check, ...]:
    return tuple(check for group in groups for check in group)


def _field_checks(rule: str, name: str, spec: FieldExpect) -> tuple[_Check, ...]:
    """The checks of one field as `spec` says, named after the page rule that says it."""
    base = subject(rule, name)
    return tuple(
        _Check(
            f"{base}.{what}",
            fail_kind(f"{base}.{what}"),
            name,
            _named(name, _test(what, spec)),
            _passes(what, spec),
        )
        for what in asked(spec)
    )


def asked(spec: FieldExpect) -> tuple[str, ...]:
    """The page checks `spec` asks for, in the order they run: the last part of their names."""
    return tuple(
        what
        for what in ("present", "type", "range", "length", "pattern", "one_of")
        if (spec.present is True if what == "present" else getattr(spec, what) is not None)
    )


def expectation_names(expect: Expect) -> tuple[str, ...]:
    """Every page expectation's name, in the order `expect` gives them (fill rates are no page's)."""
    names = [f"{subject('', n)}.{what}" for n, spec in expect.fields.items() for what in asked(spec)]
    names += ["schema"] if expect.json_schema not in (None, True) else []
    for rule in expect.pages:
        names += [
            f"{subject(rule.name, n)}.{what}" for n, spec in rule.fields.items() for what in asked(spec)
        ]
        if "json_schema" in rule.model_fields_set and rule.json_schema not in (None, True):
            names.append(f"{rule.name}/schema")
    return tuple(names)


def _test(what: str, spec: FieldExpect) -> Test:
    if what == "present":
        return lambda value: "is missing" if missing(value) else None
    if what == "type":
        assert spec.type is not None
        return _each(_TYPES[spec.type], each=spec.type != "list")
    if what == "range":
        assert spec.range is not None
        return _each(_in_range(spec.range))
    if what == "length":
        assert spec.length is not None
        return _each(_length(spec.length), each=False)
    if what == "pattern":
        assert spec.pattern is not None
        return _each(_matches(spec.pattern))
    assert spec.one_of is not None
    return _each(_one_of(spec.one_of))


def _passes(what: str, spec: FieldExpect) -> Passes:
    """The quick pass of a check (`_test`'s): no value, or one value that is plainly good; a list
    and anything else are left to the check itself."""
    if what == "present":
        return lambda v: not (v is None or (v.__class__ in _EMPTIABLE and not v))
    if what == "type":
        assert spec.type is not None
        if spec.type == "date":
            return lambda v: v is None or _is_date(v)
        classes = _CLASSES[spec.type]
        return lambda v: v.__class__ in classes or v is None
    if what == "range":
        assert spec.range is not None
        within = _within(parse_bounds(spec.range))
        return lambda v: (v.__class__ in _NUMBERS and within(v)) or v is None
    if what == "length":
        assert spec.length is not None
        within = _within(parse_bounds(spec.length))
        return lambda v: (v.__class__ in _EMPTIABLE and within(len(v))) or v is None
    if what == "pattern":
        assert spec.pattern is not None
        search = re.compile(spec.pattern).search
        return lambda v: (v.__class__ is str and search(v) is not None) or v is None
    assert spec.one_of is not None
    allowed = frozenset((v.__class__ is bool, v) for v in spec.one_of)
    return lambda v: (v.__class__ in _SCALARS and (v.__class__ is bool, v) in allowed) or v is None


def _within(bounds: Bounds) -> Callable[[float], bool]:
    """Bounds.holds in one comparison."""
    low, high = bounds.low, bounds.high
    if bounds.low_included:
        if bounds.high_included:
            return lambda x: low <= x <= high
        return lambda x: low <= x < high
    if bounds.high_included:
        return lambda x: low < x <= high
    return lambda x: low < x < high


_NUMBERS: frozenset[Any] = frozenset({int, float})
_SCALARS = frozenset({str, int, float, bool})
_CLASSES: dict[str, frozenset[type]] = {
    "str": frozenset({str}),
    "int": frozenset({int}),
    "float": _NUMBERS,  # a whole number is a number too
    "bool": frozenset({bool}),
    "list": frozenset({list}),
    "dict": frozenset({dict}),
}


def _named(name: str, test: Test) -> Test:
    def named(value: Any) -> str | None:
        why = test(value)
        return None if why is None else f"{name}{'' if why.startswith('[') else ' '}{why}"

    return named


def _each(one: Test, *, each: bool = True) -> Test:
    """A value check of a value that is there; of each item of a list, if `each`."""

    def test(value: Any) -> str | None:
        if missing(value):
            return None
        if each and value.__class__ is list:
            for i, item in enumerate(value):
                why = one(item)
                if why is not None:
                    return f"[{i}] {why}"
            return None
        return one(value)

    return test


def _is_number(value: Any) -> bool:
    return value.__class__ in (int, float)


def _is_date(value: Any) -> bool:
    if value.__class__ is not str:
        return False
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


_KIND_OF: dict[type, str] = {str: "str", int: "int", float: "float", bool: "bool", list: "list", dict: "dict"}
_IS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: v.__class__ is str,
    "int": lambda v: v.__class__ is int,
    "float": _is_number,  # a whole number is a number too
    "bool": lambda v: v.__class__ is bool,
    "date": _is_date,
    "list": lambda v: v.__class__ is list,
    "dict": lambda v: v.__class__ is dict,
}


def _type_test(wanted: str) -> Test:
    ok = _IS[wanted]

    def test(value: Any) -> str | None:
        if ok(value):
            return None
        kind = "null" if value is None else _KIND_OF.get(value.__class__, type(value).__name__)
        return f"is {_show(value)} ({kind}), not {wanted}"

    return test


_TYPES: dict[str, Test] = {name: _type_test(name) for name in _IS}


def _in_range(text: str) -> Test:
    bounds = parse_bounds(text)
    holds = bounds.holds

    def test(value: Any) -> str | None:
        if not _is_number(value):
            return f"is {_show(value)}, not a number"
        return None if holds(value) else f"is {_show(value)}, not {bounds.text}"

    return test


def _length(text: str) -> Test:
    bounds = parse_bounds(text)

    def test(value: Any) -> str | None:
        if value.__class__ not in _EMPTIABLE:
            return f"is {_show(value)}, which has no length"
        size = len(value)
        unit = "characters" if value.__class__ is str else "items"
        return None if bounds.holds(size) else f"has {size} {unit}, not {bounds.text}"

    return test


def _matches(pattern: str) -> Test:
    search = re.compile(pattern).search

    def test(value: Any) -> str | None:
        if value.__class__ is str:
            text = value
        elif _is_number(value):
            text = str(value)
        else:
            return f"is {_show(value)}, not text"
        return None if search(text) else f"{_show(value)} does not match {pattern!r}"

    return test


def _one_of(values: tuple[Any, ...]) -> Test:
    # True == 1 in Python: a bool is only one of the bools, a number only one of the numbers.
    allowed = frozenset((v.__class__ is bool, v) for v in values)
    shown = _clip(", ".join(_show(v) for v in values), SHOWN * 2)

    def test(value: Any) -> str | None:
        try:
            if (value.__class__ is bool, value) in allowed:
                return None
        except TypeError:  # a list or an object is no one value
            pass
        return f"is {_show(value)}, not one of {shown}"

    return test


def _schema_check(rule: str, schema: dict[str, Any] | bool | None) -> _Schema | None:
    if schema is None or schema is True:
        return None
    cls = validator_for(schema, default=Draft202012Validator)
    validator = cls(schema, format_checker=FormatChecker())
    name = f"{rule}/schema" if rule else "schema"
    return _Schema(
        name, fail_kind(name), validator, quick_pass(schema) if cls is Draft202012Validator else None
    )


_REPR = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_REPR.maxstring = _REPR.maxother = SHOWN
_REPR.maxlist = _REPR.maxdict = 4
_REPR.maxlevel = 2


def _show(value: Any) -> str:
    """A value as a reason quotes it, cut short: a reason never holds a whole page's worth of text."""
    if value is None or value.__class__ is bool:
        return "null" if value is None else str(value).lower()  # as YAML and JSON spell them
    return _clip(_REPR.repr(value), SHOWN)


def _clip(text: str, most: int) -> str:
    return text if len(text) <= most else text[: most - 1] + "…"
