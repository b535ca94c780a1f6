"""Checks of single values in domains.yaml: selectors, patterns, hooks, durations, host names; and
the base of its sections."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Annotated, Any

from cssselect import HTMLTranslator, SelectorError
from lxml import etree
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

_TRANSLATOR = HTMLTranslator()


def css_to_xpath(selector: str) -> str:
    """The XPath of a CSS selector, relative to the node it is evaluated on; ValueError if invalid."""
    try:
        return _TRANSLATOR.css_to_xpath(selector)
    except (SelectorError, TypeError) as exc:
        raise ValueError(f"{selector!r} is not a CSS selector ({exc})") from None


def check_xpath(expression: str) -> str:
    """`expression` if lxml compiles it as XPath; ValueError saying why not."""
    try:
        etree.XPath(expression)
    except etree.XPathSyntaxError as exc:
        raise ValueError(f"{expression!r} is not an XPath expression ({exc})") from None
    return expression


@lru_cache(maxsize=256)
def import_hook(ref: str) -> Callable[..., Any]:
    """The function named by "package.module:function"; ValueError saying why it cannot be had."""
    module_name, colon, attr = ref.partition(":")
    if not colon or not module_name or not attr:
        raise ValueError(f"{ref!r}: write a parse hook as package.module:function")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the module's own code may raise anything while importing
        raise ValueError(f"{ref!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise ValueError(f"{ref!r}: {module_name} has no function {attr}")
    return target  # type: ignore[no-any-return]


def check_hook(ref: str) -> str:
    import_hook(ref)
    return ref


Hook = Annotated[str, AfterValidator(check_hook)]


def check_css(value: str) -> str:
    css_to_xpath(value)
    return value


def check_pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
    return value


class Strict(BaseModel):
    """A section of domains.yaml: unknown keys refused, frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*")


def parse_duration(value: Any) -> Any:
    """Seconds from a duration as written: a number (seconds) or 90s, 30m, 6h, 2d, 1w."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return value  # the model says what it wanted
    if isinstance(value, int | float):
        return float(value)
    found = _DURATION.fullmatch(value)
    if found is None:
        raise ValueError(f"{value!r} is not a duration: write e.g. 90s, 30m, 6h, 2d or 1w")
    return float(found[1]) * _UNITS[found[2] or "s"]


Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=366 * 86_400)]


def none_if_off(value: Any) -> Any:
    # YAML reads a bare `off` (and `no`) as false: recrawl off, as null says.
    return None if value is False else value


def valid_domain(name: str) -> str:
    domain = name.strip().lower().rstrip(".")
    labels = domain.split(".")
    if (
        not domain
        or len(domain) > 253
        or any(
            not label or len(label) > 63 or not all(c.isalnum() or c == "-" for c in label)
            for label in labels
        )
    ):
        raise ValueError(f"{name!r} is not a host name (expected e.g. shop.example)")
    return domain


def nested_pair(domains: Iterable[str]) -> tuple[str, str] | None:
    """A domain of `domains` and another of them it lies inside, if any (by each one's parents, so
    50,000 domains take a moment, not a pair each)."""
    every = set(domains)
    for domain in every:
        parent = domain
        while "." in parent:
            parent = parent.partition(".")[2]
            if parent in every:
                return domain, parent
    return None
