"""A page's quality counts, as kinds of its crawl's counts, and a crawl's coverage read back from them.

A page adds one to a few kinds: pages checked, pages with each field, failures of each expectation.
They are kinds of the crawl's counts hash (field `domain kind`, crawler/names/keys.py's crawl_counts_key),
added in the same atomic step as the page's outcome (CrawlState.count), so a crawl's coverage is read
from its counts, live or as its row keeps them once it ended, without a pass over its pages.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import quote, unquote

PREFIX = "q:"  # every quality kind begins so; no outcome kind does
ITEMS = "q:items"  # pages checked; "q:items:RULE", those of a page rule
INVALID = "q:invalid"  # pages that failed an expectation
_FILL = "q:fill:"  # + subject: pages with a value of the field
_FAIL = "q:fail:"  # + expectation name: pages that failed it
# The counts hash splits `domain kind` at its last space; the subject splits a page rule off at "/".
_ESCAPED = re.compile(r"[%/\s]")
K = TypeVar("K")


def escape(name: str) -> str:
    """A field's name as it goes into a kind: no space, no "/" (percent-encoded, with "%" itself)."""
    return _ESCAPED.sub(lambda m: quote(m[0], safe=""), name)


def subject(page_rule: str, name: str) -> str:
    """A field as a kind and a report name it: `price`, or `product/price` on a page rule's pages."""
    return f"{page_rule}/{escape(name)}" if page_rule else escape(name)


def items_kind(page_rule: str = "") -> str:
    """The kind counting pages checked: every page (""), or a page rule's."""
    return f"{ITEMS}:{page_rule}" if page_rule else ITEMS


def fill_kind(page_rule: str, name: str) -> str:
    """The kind counting pages with a value of field `name` (all pages, or a page rule's)."""
    return _FILL + subject(page_rule, name)


def fail_kind(expectation: str) -> str:
    """The kind counting pages that failed the expectation named `expectation` (`price.range`)."""
    return _FAIL + expectation


def is_quality(kind: str) -> bool:
    """Whether a kind of a crawl's counts is a quality count (views of outcomes leave these out)."""
    return kind.startswith(PREFIX)


@dataclass(frozen=True, slots=True)
class Share:
    """`n` pages of `of`."""

    n: int
    of: int

    @property
    def rate(self) -> float | None:
        """n / of; None when there is no page to judge."""
        return self.n / self.of if self.of > 0 else None


def percent(rate: float) -> str:
    """A rate as the reports show it: 97.5%."""
    return f"{100 * rate:.1f}%"


@dataclass(frozen=True, slots=True)
class Coverage:
    """One domain's quality counts in one crawl: pages checked (per page rule, "" for every page),
    pages with each field (per page rule and field), pages failing each expectation, invalid pages."""

    items: Mapping[str, int] = field(default_factory=dict)
    filled: Mapping[tuple[str, str], int] = field(default_factory=dict)
    failed: Mapping[str, int] = field(default_factory=dict)
    invalid: int = 0

    @classmethod
    def of(cls, kinds: Mapping[str, int]) -> Coverage:
        """The coverage in one domain's counts (kind -> n); outcome kinds, and quality kinds this
        version does not know, are left out."""
        items: dict[str, int] = {}
        filled: dict[tuple[str, str], int] = {}
        failed: dict[str, int] = {}
        invalid = 0
        for kind, n in kinds.items():
            if not kind.startswith(PREFIX):
                continue
            if kind == ITEMS:
                items[""] = int(n)
            elif kind.startswith(ITEMS + ":"):
                items[kind[len(ITEMS) + 1 :]] = int(n)
            elif kind == INVALID:
                invalid = int(n)
            elif kind.startswith(_FILL):
                rule, _, name = kind[len(_FILL) :].rpartition("/")
                filled[rule, unquote(name)] = int(n)
            elif kind.startswith(_FAIL):
                failed[kind[len(_FAIL) :]] = int(n)
        return cls(items, filled, failed, invalid)

    def kinds(self) -> dict[str, int]:
        """These counts as kinds, as a crawl's counts hold them."""
        out = {items_kind(rule): n for rule, n in self.items.items()}
        out.update({fill_kind(rule, name): n for (rule, name), n in self.filled.items()})
        out.update({fail_kind(name): n for name, n in self.failed.items()})
        if self.invalid:
            out[INVALID] = self.invalid
        return out

    def pages(self, page_rule: str = "") -> int:
        """Pages checked: every page, or a page rule's."""
        return self.items.get(page_rule, 0)

    def fill(self, page_rule: str, name: str) -> Share:
        """The pages with a value of field `name`, of those checked (every page, or a page rule's)."""
        return Share(self.filled.get((page_rule, name), 0), self.pages(page_rule))

    def failures(self, expectation: str) -> Share:
        """The pages that failed an expectation, of the pages it applies to."""
        rule, slash, _ = expectation.partition("/")
        return Share(self.failed.get(expectation, 0), self.pages(rule if slash else ""))

    def since(self, earlier: Coverage) -> Coverage:
        """What was counted after `earlier`, a reading of the same crawl: the pages of a recent window,
        whose rates react to a broken selector faster than the whole crawl's."""
        return Coverage(
            _minus(self.items, earlier.items),
            _minus(self.filled, earlier.filled),
            _minus(self.failed, earlier.failed),
            max(0, self.invalid - earlier.invalid),
        )


def _minus(now: Mapping[K, int], then: Mapping[K, int]) -> dict[K, int]:
    return {key: max(0, n - then.get(key, 0)) for key, n in now.items()}


def coverage_of(counts: Mapping[str, Mapping[str, int]]) -> dict[str, Coverage]:
    """Each domain's coverage in a crawl's counts per domain: CrawlState.counts(), live, or the
    `counts` its row keeps once it ended. Domains with no page checked are left out."""
    out = {}
    for domain, kinds in counts.items():
        found = Coverage.of(kinds)
        if found.items:
            out[domain] = found
    return out


class Tally:
    """Quality counts summed in memory, per domain: a re-parse's, or a bench's."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[str, int]] = {}

    def add(self, domain: str, kinds: tuple[str, ...]) -> None:
        """Count one page's kinds (Verdict.kinds)."""
        mine = self._counts.setdefault(domain, {})
        for kind in kinds:
            mine[kind] = mine.get(kind, 0) + 1

    def coverage(self) -> dict[str, Coverage]:
        """Each domain's coverage so far."""
        return coverage_of(self._counts)
