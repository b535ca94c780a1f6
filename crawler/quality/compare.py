"""A crawl's coverage of one domain against what is expected of it and against the domain's last
finished crawl: the rows of the coverage table and the alerts they raise. Pure: callers read the
coverages (crawler/quality/coverage.py) and say which crawl is the baseline."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol

from crawler.quality.checks import expectation_names
from crawler.quality.coverage import Coverage, Share, percent, subject
from crawler.quality.expect import DEFAULT_MAX_DROP, DEFAULT_MIN_SAMPLE, Expect, tracked_fields

AlertKind = Literal["below_expected", "dropped", "failing", "too_few"]
"""below_expected: a fill rate under its `present:` rate; dropped: more than `max_drop` under the last
crawl's; failing: a page expectation failing on more than `max_drop` of pages beyond the last crawl's
share (beyond none, without a last crawl); too_few: a finished crawl under `min_items`."""

_EPSILON = 1e-9  # a rate exactly at its floor is no alert, whatever the float arithmetic says


@dataclass(frozen=True, slots=True)
class Thresholds:
    """What a domain's coverage is held to, from its `expect:` section and `extract` fields."""

    fields: tuple[str, ...] = ()  # whose fill rates are shown and compared
    page_rules: tuple[str, ...] = ()
    expectations: tuple[str, ...] = ()  # page expectations' names, in the order configured
    fill: Mapping[tuple[str, str], float] = field(default_factory=dict)  # (page rule, field) -> rate
    min_items: Mapping[str, int] = field(default_factory=dict)  # page rule ("" all) -> items
    max_drop: float | None = DEFAULT_MAX_DROP
    min_sample: int = DEFAULT_MIN_SAMPLE

    @classmethod
    def of(cls, expect: Expect | None, fields: Iterable[str] = ()) -> Thresholds:
        """The thresholds of a domain whose `expect:` is `expect` and whose `extract` fields are `fields`."""
        expect = expect if expect is not None else Expect()
        fill = {("", n): s.present for n, s in expect.fields.items() if not isinstance(s.present, bool)}
        minimum = {"": expect.min_items} if expect.min_items is not None else {}
        for rule in expect.pages:
            fill.update(
                {(rule.name, n): s.present for n, s in rule.fields.items() if not isinstance(s.present, bool)}
            )
            if rule.min_items is not None:
                minimum[rule.name] = rule.min_items
        return cls(
            tracked_fields(expect, fields),
            tuple(rule.name for rule in expect.pages),
            expectation_names(expect),
            fill,
            minimum,
            expect.max_drop or None,
            expect.min_sample,
        )


class Ended(Protocol):
    """A crawl as its row keeps it (crawler.sink.crawls.CrawlRecord, which this layer does not import)."""

    @property
    def id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def finished_at(self) -> datetime | None: ...
    @property
    def counts(self) -> Mapping[str, Mapping[str, int]] | None: ...


def last_finished(crawls: Iterable[Ended], domain: str, *, besides: str | None = None) -> Ended | None:
    """The domain's last finished crawl among `crawls` (but `besides`, the one being judged): the
    latest to finish that checked pages of it. A cancelled crawl is no baseline."""
    found = baselines(crawls, [domain], besides=besides).get(domain)
    return found[0] if found is not None else None


def baselines(
    crawls: Iterable[Ended], domains: Iterable[str], *, besides: str | None = None
) -> dict[str, tuple[Ended, Coverage]]:
    """Each of `domains`' last finished crawl (as `last_finished`) and its coverage there. Newest
    first, a domain is looked up only until found: a reading of 50,000 domains is not 50,000 scans."""
    ended = [
        (c.finished_at, c) for c in crawls if c.state == "finished" and c.id != besides and c.finished_at
    ]
    # Stable: of crawls that finished at the same time, the first listed is the one kept.
    ended.sort(key=lambda dated: dated[0], reverse=True)
    wanted, out = set(domains), {}
    for _, crawl in ended:
        if not wanted:
            break
        counts = crawl.counts or {}
        for domain in wanted.intersection(counts):
            coverage = Coverage.of(counts[domain])
            if coverage.pages():
                out[domain] = (crawl, coverage)
        wanted.difference_update(out)
    return out


@dataclass(frozen=True, slots=True)
class Alert:
    """Something a person should look at: what kind, where (page rule, field or expectation), why."""

    domain: str
    kind: AlertKind
    page_rule: str  # "" for every page of the domain
    subject: str  # a field, an expectation's name, or "items"
    message: str


@dataclass(frozen=True, slots=True)
class FieldRow:
    """A field's fill rate on a page rule's pages ("" every page), now and in the baseline; `floor`,
    once enough pages were read, is the rate under which it alerts."""

    page_rule: str
    field: str
    now: Share
    before: Share | None
    expected: float | None
    floor: float | None
    alerts: tuple[AlertKind, ...] = ()


@dataclass(frozen=True, slots=True)
class ExpectationRow:
    """The pages that failed a page expectation, of those it applies to, now and in the baseline."""

    name: str
    page_rule: str
    now: Share
    before: Share | None
    alerts: tuple[AlertKind, ...] = ()


@dataclass(frozen=True, slots=True)
class ItemsRow:
    """Pages checked (items) on a page rule's pages ("" every page), now and in the baseline."""

    page_rule: str
    now: int
    before: int | None
    minimum: int | None
    alerts: tuple[AlertKind, ...] = ()


@dataclass(frozen=True, slots=True)
class DomainQuality:
    """One domain's part of the coverage table, and its alerts."""

    domain: str
    baseline: str | None  # the crawl compared with (None: none)
    invalid: int
    items: tuple[ItemsRow, ...]
    fields: tuple[FieldRow, ...]
    expectations: tuple[ExpectationRow, ...]
    alerts: tuple[Alert, ...]


def compare(
    domain: str,
    now: Coverage,
    thresholds: Thresholds,
    before: Coverage | None = None,
    *,
    finished: bool = False,
    baseline: str | None = None,
) -> DomainQuality:
    """`domain`'s coverage `now` held to `thresholds` and to `before`, the baseline's (the last finished
    crawl of the domain, or the same crawl before a re-parse, named `baseline`). `min_items` is judged
    only once the crawl is `finished`; no rate on fewer pages than `min_sample`."""
    alerts: list[Alert] = []
    rules = ("", *thresholds.page_rules)
    items = tuple(_items(domain, rule, now, before, thresholds, finished, alerts) for rule in rules)
    fields = tuple(
        _field(domain, rule, name, now, before, thresholds, alerts)
        for rule in rules
        for name in thresholds.fields
    )
    named = set(thresholds.expectations)
    others = sorted({*now.failed, *(before.failed if before else ())} - named)
    expectations = tuple(
        _expectation(domain, name, now, before, thresholds, alerts)
        for name in (*thresholds.expectations, *others)
    )
    return DomainQuality(domain, baseline, now.invalid, items, fields, expectations, tuple(alerts))


def _items(
    domain: str,
    rule: str,
    now: Coverage,
    before: Coverage | None,
    thresholds: Thresholds,
    finished: bool,
    alerts: list[Alert],
) -> ItemsRow:
    n, minimum = now.pages(rule), thresholds.min_items.get(rule)
    raised: tuple[AlertKind, ...] = ()
    if finished and minimum is not None and n < minimum:
        raised = ("too_few",)
        on = f" on {rule!r} pages" if rule else ""
        alerts.append(
            Alert(
                domain,
                "too_few",
                rule,
                "items",
                f"{domain}: {n} items{on}, fewer than the {minimum} expected",
            )
        )
    return ItemsRow(rule, n, before.pages(rule) if before is not None else None, minimum, raised)


def _field(
    domain: str,
    rule: str,
    name: str,
    now: Coverage,
    before: Coverage | None,
    thresholds: Thresholds,
    alerts: list[Alert],
) -> FieldRow:
    share = now.fill(rule, name)
    then = before.fill(rule, name) if before is not None and before.pages(rule) else None
    expected = thresholds.fill.get((rule, name))
    if share.rate is None or share.of < thresholds.min_sample:
        return FieldRow(rule, name, share, then, expected, None)
    floors: list[float] = []
    raised: list[AlertKind] = []
    where = f"{domain}'s {rule!r} pages" if rule else f"{domain}'s pages"
    shown = subject(rule, name)
    if expected is not None:
        floors.append(expected)
        if share.rate < expected - _EPSILON:
            raised.append("below_expected")
            alerts.append(
                Alert(
                    domain,
                    "below_expected",
                    rule,
                    name,
                    f"{shown}: on {percent(share.rate)} of {where}, below the {percent(expected)} expected",
                )
            )
    if (
        thresholds.max_drop is not None
        and then is not None
        and then.rate is not None
        and then.of >= thresholds.min_sample
    ):
        floors.append(then.rate - thresholds.max_drop)
        if share.rate < then.rate - thresholds.max_drop - _EPSILON:
            raised.append("dropped")
            alerts.append(
                Alert(
                    domain,
                    "dropped",
                    rule,
                    name,
                    f"{shown}: on {percent(share.rate)} of {where}, "
                    f"down from {percent(then.rate)} in the last crawl",
                )
            )
    floor = max(floors) if floors else None
    return FieldRow(rule, name, share, then, expected, floor, tuple(raised))


def _expectation(
    domain: str,
    name: str,
    now: Coverage,
    before: Coverage | None,
    thresholds: Thresholds,
    alerts: list[Alert],
) -> ExpectationRow:
    rule = name.partition("/")[0] if "/" in name else ""
    share = now.failures(name)
    then = before.failures(name) if before is not None and before.pages(rule) else None
    row = ExpectationRow(name, rule, share, then)
    if thresholds.max_drop is None or share.rate is None or share.of < thresholds.min_sample:
        return row
    judged = then is not None and then.rate is not None and then.of >= thresholds.min_sample
    usual = then.rate if judged and then is not None and then.rate is not None else 0.0
    if share.rate <= usual + thresholds.max_drop + _EPSILON:
        return row
    where = f"{domain}'s {rule!r} pages" if rule else f"{domain}'s pages"
    against = f", against {percent(usual)} in the last crawl" if judged else ""
    message = f"{name}: failed on {percent(share.rate)} of {where} ({share.n}){against}"
    alerts.append(Alert(domain, "failing", rule, name, message))
    return ExpectationRow(name, rule, share, then, ("failing",))
