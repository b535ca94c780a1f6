"""The field language of domains.yaml (`extract`), compiled once per configuration, run per page."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import urljoin

from lxml import etree

from crawler.config import FieldRule, css_to_xpath
from crawler.parse.types import CONVERTERS, to_date

MAX_FIELD = 10_000
MAX_ITEMS = 1_000  # values of one `all` field: a page of 10^5 matches must not make a 10^5-item row

_TEXT = etree.XPath("string()", smart_strings=False)
_UNSET = object()


@dataclass(frozen=True, slots=True)
class CompiledField:
    """One field, ready to run against a page's tree (or, in a group, against one block of it)."""

    name: str
    xpath: etree.XPath
    all: bool
    attr: str | None
    regex: re.Pattern[str] | None
    convert: Callable[[str], Any] | None
    default: Any
    required: bool
    group: tuple[CompiledField, ...] | None

    def value(self, node: etree._Element, base: str) -> Any:
        """The field's value under `node`; `base` makes URL attributes absolute."""
        try:
            found = self.xpath(node)
        except etree.XPathError:
            found = []
        if not isinstance(found, list):
            found = [found]  # an XPath may yield a string, number or boolean
        if not self.all:
            for item in found:
                value = self._one(item, base)
                if value is not None:
                    return value
            return self.default
        values = []
        for item in found:
            value = self._one(item, base)
            if value is not None:
                values.append(value)
                if len(values) >= MAX_ITEMS:
                    break
        return values or ([] if self.default is None else self.default)

    def _one(self, item: Any, base: str) -> Any:
        if self.group is not None:
            if not isinstance(item, etree._Element):
                return None
            return {f.name: f.value(item, base) for f in self.group}
        raw = _text(item, self.attr, base)
        text = None if raw is None else _normalise(raw)
        if text is None:
            return None
        if self.regex is not None:
            found = self.regex.search(text)
            if found is None or found[1 if self.regex.groups else 0] is None:
                return None
            text = found[1 if self.regex.groups else 0]
        return text if self.convert is None else self.convert(text)


Fields: TypeAlias = Mapping[str, CompiledField]

# Attributes whose values are URLs, made absolute against the page (and its <base href>).
_URL_ATTRS = frozenset({"href", "src", "action", "data-src", "poster", "cite"})


def compile_fields(rules: Mapping[str, FieldRule | str]) -> Fields:
    """Compile each field once; ValueError naming the field if a selector is invalid."""
    return {name: _compile(name, rule, top=True) for name, rule in rules.items()}


def _compile(name: str, rule: FieldRule | str, *, top: bool) -> CompiledField:
    try:
        if isinstance(rule, str):
            rule = FieldRule(css=rule)
        if rule.css is not None:
            # cssselect's descendant-or-self:: prefix makes a group's selectors relative to the block.
            expression = css_to_xpath(rule.css)
            if top and not rule.all and rule.attr is None and rule.fields is None:
                # (...)[1] lets libxml2 stop at the first match, the common case.
                expression = f"({expression})[1]"
        else:
            assert rule.xpath is not None  # the model requires one of them
            expression = rule.xpath
        xpath = etree.XPath(expression, smart_strings=False)
    except (ValueError, etree.XPathError) as exc:
        raise ValueError(f"field {name!r}: {exc}") from exc
    convert: Callable[[str], Any] | None = CONVERTERS.get(rule.type)
    if rule.type == "date" and rule.format is not None:
        fmt = rule.format

        def convert(text: str) -> Any:
            return to_date(text, fmt)

    group = None
    if rule.fields is not None:
        group = tuple(_compile(sub, subrule, top=False) for sub, subrule in rule.fields.items())
    return CompiledField(
        name=name,
        xpath=xpath,
        all=rule.all,
        attr=rule.attr,
        regex=re.compile(rule.regex) if rule.regex is not None else None,
        convert=convert,
        default=rule.default,
        required=rule.required,
        group=group,
    )


def extract_fields(root: etree._Element, base: str, fields: Fields) -> dict[str, Any]:
    """Every field's value on the page whose tree is `root`."""
    return {name: field.value(root, base) for name, field in fields.items()}


def missing_required(fields: Fields, data: Mapping[str, Any]) -> list[str]:
    """The required fields `data` has no value for (None or an empty list)."""
    return [name for name, f in fields.items() if f.required and data.get(name) in (None, [], "")]


def _text(item: Any, attr: str | None, base: str) -> str | None:
    if isinstance(item, etree._Element):
        if attr is None:
            return str(_TEXT(item))
        value: str | None = item.get(attr)
        if value is None:
            return None
        if attr in _URL_ATTRS:
            return _absolute(value.strip(), base)
        return value
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float) and item.is_integer():
        return str(int(item))
    return None if item is None else str(item)  # an attribute node or a string result


def _absolute(href: str, base: str) -> str | None:
    if not href:
        return None
    try:
        return urljoin(base, href)
    except ValueError:
        return None


def _normalise(text: str) -> str | None:
    return " ".join(text.split())[:MAX_FIELD].rstrip() or None
