"""The `expect:` section of domains.yaml: what a domain's extracted data must look like, on each page
and over a crawl, as validated models the configuration embeds (docs/quality.md)."""

from __future__ import annotations

import contextlib
import difflib
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from jsonschema.exceptions import SchemaError
from jsonschema.validators import Draft202012Validator, validator_for
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012, specification_with

from crawler.errors import ConfigError

ValueType = Literal["str", "int", "float", "bool", "date", "list", "dict"]
COMPARISONS = (">", ">=", "<", "<=", "between")
DEFAULT_MAX_DROP = 0.10  # a fill rate more than 10 points below the last crawl's raises an alert
DEFAULT_MIN_SAMPLE = 30  # no rate is judged on fewer pages than this: 1 page of 3 is no trend

_OPERATOR = re.compile(r"\s*([<>=!~]+|[A-Za-z_]+)\s*(.*?)\s*$")
_BETWEEN = re.compile(r"between\s+(\S+)\s+and\s+(\S+)", re.IGNORECASE)
_RULE_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
# Keys people reach for first, and the key this language spells them with.
_SYNONYMS = {
    "regex": "pattern",
    "match": "pattern",
    "in": "one_of",
    "enum": "one_of",
    "oneof": "one_of",
    "required": "present",
    "min": "range",
    "max": "range",
    "mostly": "present",
    "rules": "pages",
}


@dataclass(frozen=True, slots=True)
class Bounds:
    """The numbers a comparison (`> 0`, `between 1 and 5`, `>= 0, < 100`) lets through."""

    low: float = -math.inf
    low_included: bool = True
    high: float = math.inf
    high_included: bool = True
    text: str = ""

    def holds(self, x: float) -> bool:
        """Whether `x` is within the bounds (NaN never is)."""
        return (self.low < x or (self.low_included and x == self.low)) and (
            x < self.high or (self.high_included and x == self.high)
        )


def parse_bounds(text: Any) -> Bounds:
    """A comparison's bounds; ValueError saying what is wrong in one line."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError('write a comparison as text: "> 0", ">= 1, < 100" or "between 1 and 5"')
    lows: list[tuple[float, bool]] = []
    highs: list[tuple[float, bool]] = []
    for part in (p.strip() for p in text.split(",")):
        found = _OPERATOR.fullmatch(part)
        if not part or found is None:
            raise ValueError(f"{text!r} has no comparison; use one of {', '.join(COMPARISONS)}")
        op, rest = found[1], found[2]
        if op.lower() == "between":
            pair = _BETWEEN.fullmatch(part)
            if pair is None:
                raise ValueError(f"{part!r}: write between A and B")
            low, high = _number(pair[1], part), _number(pair[2], part)
            if low > high:
                raise ValueError(f"{part!r}: the first number must not be above the second")
            lows.append((low, True))
            highs.append((high, True))
        elif op in (">", ">="):
            lows.append((_number(rest, part), op == ">="))
        elif op in ("<", "<="):
            highs.append((_number(rest, part), op == "<="))
        else:
            raise ValueError(f"unknown comparison {op!r}; use one of {', '.join(COMPARISONS)}")
    low, low_in = _strictest(lows, above=True)
    high, high_in = _strictest(highs, above=False)
    if low > high or (low == high and not (low_in and high_in)):
        raise ValueError(f"no number is {text.strip()}")
    return Bounds(low, low_in, high, high_in, text.strip())


def _number(text: str, part: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ValueError(f"{part!r}: {text!r} is not a number") from None
    return value


def _strictest(bounds: list[tuple[float, bool]], *, above: bool) -> tuple[float, bool]:
    best, included = (-math.inf if above else math.inf), True
    for value, inclusive in bounds:
        tighter = value > best if above else value < best
        if tighter or (value == best and not inclusive):
            best, included = value, inclusive
    return best, included


def _comparison(value: Any) -> str:
    return parse_bounds(value).text


def _rate(value: Any) -> float:
    """A rate as written, 95% or 0.95, as a fraction in (0, 1]."""
    share = math.nan
    if isinstance(value, str) and value.strip().endswith("%"):
        with contextlib.suppress(ValueError):  # not a number: no rate, said below
            share = float(value.strip()[:-1]) / 100
    elif isinstance(value, int | float) and not isinstance(value, bool):
        share = float(value)
    if not 0 < share <= 1:
        raise ValueError(f"{value!r} is not a rate: write a percentage (95%) or a fraction (0.95), above 0")
    return share


def _presence(value: Any) -> bool | float:
    return value if isinstance(value, bool) else _rate(value)


def _drop(value: Any) -> float | Literal[False]:
    # YAML reads `off` and `no` as false. Off is False, not None: a configuration merged from its
    # defaults with exclude_none would take None for unset, and bring the default back.
    return False if value is None or value is False or value == "off" else _rate(value)


def _pattern(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("write a pattern as text (a regular expression)")
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
    return value


def _values(value: Any) -> Any:
    if not isinstance(value, list | tuple) or not value:
        raise ValueError("one_of takes a list of at least one value")
    for item in value:
        if item is not None and not isinstance(item, str | int | float | bool):
            raise ValueError(f"one_of takes text, numbers, true, false or null, not {item!r}")
    return tuple(value)


def _schema(value: Any) -> Any:
    """A JSON Schema, checked against its dialect's meta-schema; references stay inside it."""
    if isinstance(value, bool):
        return value  # true accepts every page (a page rule's way to set the domain's schema aside)
    if not isinstance(value, dict):
        raise ValueError("schema takes a JSON Schema: a mapping (or true)")
    cls = validator_for(value, default=Draft202012Validator)
    try:
        cls.check_schema(value)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON Schema at {exc.json_path}: {_line(exc.message)}") from None
    spec = specification_with(value.get("$schema", ""), default=DRAFT202012)
    resource = spec.create_resource(value)
    uri = resource.id() or "urn:crawler:expect"
    resolver = Registry().with_resource(uri, resource).resolver(base_uri=uri)
    for ref in _refs(value):
        if not ref.startswith("#"):
            raise ValueError(f"$ref {ref!r}: only references inside the schema (#/...) are read")
        try:
            resolver.lookup(ref)
        except Unresolvable:
            raise ValueError(f"$ref {ref!r} leads nowhere in the schema") from None
    return value


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _line(text: str, most: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= most else text[: most - 1] + "…"


Comparison = Annotated[str, BeforeValidator(_comparison)]
Rate = Annotated[float, BeforeValidator(_rate)]
Pattern = Annotated[str, BeforeValidator(_pattern)]
JsonSchema = Annotated[dict[str, Any] | bool, BeforeValidator(_schema)]


class _Strict(BaseModel):
    # By name too: what model_dump() gives (`json_schema`) validates again, as domains.yaml's
    # defaults are merged with a domain's own.
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class FieldExpect(_Strict):
    """What one field must be. `present: true`: on every page (a page without it fails); a rate: on
    at least that share of pages (the crawl alerts below it; no page fails). The other checks apply to
    a value that is there, to each item of a list (but `type: list` and `length`)."""

    present: Annotated[bool | float, BeforeValidator(_presence)] = False
    type: ValueType | None = None
    range: Comparison | None = None
    length: Comparison | None = None
    pattern: Pattern | None = None
    one_of: Annotated[tuple[Any, ...] | None, BeforeValidator(_values)] = None


def _rule_name(value: Any) -> str:
    if not isinstance(value, str) or _RULE_NAME.fullmatch(value) is None:
        raise ValueError(
            f"{value!r}: a page rule's name is 1 to 40 letters, digits, - or _ (reports and metrics show it)"
        )
    return value


class PageExpect(_Strict):
    """Expectations of the pages whose path and query match `match` (the first rule that matches),
    over the domain's: a field named here replaces the domain's expectations of it; `schema` replaces
    the domain's schema (`schema: true` sets it aside)."""

    name: Annotated[str, BeforeValidator(_rule_name)]
    match: Pattern
    fields: dict[str, FieldExpect] = Field(default_factory=dict)
    json_schema: JsonSchema | None = Field(None, alias="schema")
    min_items: int | None = Field(None, ge=1)


class Expect(_Strict):
    """A domain's `expect:` section: its fields' expectations, a JSON Schema of its whole data, the
    items a crawl must store, how far a fill rate may fall from the last crawl's, and per-URL rules."""

    fields: dict[str, FieldExpect] = Field(default_factory=dict)
    json_schema: JsonSchema | None = Field(None, alias="schema")
    min_items: int | None = Field(None, ge=1)
    max_drop: Annotated[float | Literal[False], BeforeValidator(_drop)] = DEFAULT_MAX_DROP
    min_sample: int = Field(DEFAULT_MIN_SAMPLE, ge=1)
    pages: tuple[PageExpect, ...] = ()

    @model_validator(mode="after")
    def _names_once(self) -> Expect:
        seen: set[str] = set()
        for rule in self.pages:
            if rule.name in seen:
                raise ValueError(f"pages: two rules are named {rule.name!r}; give each its own name")
            seen.add(rule.name)
        return self


def tracked_fields(expect: Expect | None, fields: Iterable[str] = ()) -> tuple[str, ...]:
    """The fields whose fill rate a crawl counts: the domain's `extract` fields (`fields`), then any
    other field an expectation names (from a parse hook, say)."""
    named = [] if expect is None else [*expect.fields, *(f for rule in expect.pages for f in rule.fields)]
    return tuple(dict.fromkeys([*fields, *named]))


def load_expect(raw: Any, where: str = "expect") -> Expect:
    """An `expect:` section out of parsed YAML; ConfigError with one line per mistake, each naming its
    key path under `where` (e.g. `domains.shop.test.expect`)."""
    try:
        return Expect.model_validate({} if raw is None else raw)
    except ValidationError as exc:
        raise ConfigError("\n".join(error_lines(exc, where))) from None


def error_lines(exc: ValidationError, where: str) -> list[str]:
    """`exc` as one line per error: `where.key.path: what is wrong`."""
    lines = []
    for err in exc.errors():
        path = ".".join([where, *(str(p) for p in err["loc"])])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = unknown_key(str(err["loc"][-1]))
        lines.append(f"{path}: {message}")
    return lines


def unknown_key(key: str) -> str:
    """What to say of an unknown key of an `expect:` section: the key meant, if one is near."""
    known = {*FieldExpect.model_fields, *Expect.model_fields, *PageExpect.model_fields, "schema"}
    guess = _SYNONYMS.get(key.lower()) or next(iter(difflib.get_close_matches(key, sorted(known), n=1)), None)
    hint = f"; did you mean {guess!r}?" if guess else " (docs/quality.md lists the keys)"
    return f"unknown key{hint}"
