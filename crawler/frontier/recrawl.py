"""When a stored page is due again: its next interval from what its last fetch found.

Adaptive, as StormCrawler's AdaptiveScheduler: a page found unchanged waits half as long again
(x 1.5, up to `max`), a changed one comes halfway back toward `min`. A new page waits `every`, or
less if its server says its content expires sooner (Cache-Control max-age, Expires): the server
knows its own pages, but only ever to shorten the wait, never below `min` (politeness), and only the
first one (after that, what the page did decides). A page gone (404, 410) keeps its interval and is
dropped from the schedule after `drop_after` gone answers in a row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Literal

from crawler.config import CrawlConfig, Recrawl
from crawler.frontier.hosts import frontier_key
from crawler.frontier.message import CrawlMessage, Refresh
from crawler.frontier.publisher import Outgoing
from crawler.frontier.router import priority_for
from crawler.frontier.urls import host_of
from crawler.sink.schedule import Due

Found = Literal["new", "changed", "unchanged", "gone", "failed"]
"""What a fetch found: a page seen the first time, its content changed or not, gone, or a failure."""

GROW = 1.5  # an unchanged page's interval grows by this factor
SHRINK = 0.5  # a changed page's interval comes this share of the way back to `min`
GONE = frozenset({404, 410})
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d+)", re.I)


@dataclass(frozen=True, slots=True)
class Next:
    """A page's place in the schedule after a fetch: its interval, and when it is due (None: dropped)."""

    interval: float
    at: datetime | None
    gone: int  # gone answers in a row


def interval(recrawl: Recrawl, previous: float | None, found: Found, max_age: float | None = None) -> float:
    """The seconds until the page is due again."""
    if previous is None:
        first = recrawl.every if max_age is None else min(recrawl.every, max_age)
        return max(recrawl.lowest, first)
    previous = min(max(previous, recrawl.lowest), recrawl.highest)  # the bounds may have been edited
    if not recrawl.adaptive:
        return recrawl.every
    if found == "unchanged":
        return min(recrawl.highest, previous * GROW)
    if found == "changed":
        return previous - SHRINK * (previous - recrawl.lowest)
    return previous


def schedule(
    recrawl: Recrawl | None,
    now: datetime,
    found: Found,
    previous: float | None = None,
    gone: int = 0,
    max_age: float | None = None,
) -> Next | None:
    """Where a page stands after a fetch at `now`; None if it is not recrawled at all."""
    if recrawl is None:
        return None
    gone = gone + 1 if found == "gone" else 0
    seconds = interval(recrawl, previous, found, max_age)
    at = None if gone >= recrawl.drop_after else now + timedelta(seconds=seconds)
    return Next(seconds, at, gone)


def max_age(headers: Mapping[str, str]) -> float | None:
    """How long the server says the response stays fresh, in seconds: Cache-Control's max-age, else
    Expires less Date; None if it says neither (or says no-store / no-cache: then 0)."""
    control = headers.get("cache-control", "")
    if re.search(r"(?:^|,)\s*(?:no-store|no-cache)\b", control, re.I):
        return 0.0
    found = _MAX_AGE.search(control)
    if found is not None:
        return float(found[1])
    expires, date = headers.get("expires"), headers.get("date")
    if expires is None:
        return None
    try:
        until = parsedate_to_datetime(expires)
        sent = parsedate_to_datetime(date) if date else None
    except (TypeError, ValueError):
        return 0.0  # an unreadable Expires means already expired (RFC 9111, 5.3)
    if sent is None or until.tzinfo is None or sent.tzinfo is None:
        return None
    return max(0.0, (until - sent).total_seconds())


def refresh_message(due: Due) -> CrawlMessage:
    """The message that has a claimed page fetched again, with what its row knows."""
    # A page gone last time is asked whole: a 304 would not say it is back.
    etag, last_modified = (due.etag, due.last_modified) if due.gone == 0 else (None, None)
    refresh = Refresh(etag, last_modified, due.signature, due.interval, due.gone, due.version, due.archived)
    return CrawlMessage(due.url, due.depth, crawl=due.crawl, refresh=refresh)


def refresh_outgoing(due: Due, config: CrawlConfig) -> Outgoing:
    """A claimed page's refresh, ready to publish at the priority its domain's rules give it."""
    priority = priority_for(due.url, due.depth, config.rules_for(due.domain))
    key = frontier_key(config, host_of(due.url), priority)
    return Outgoing(key, refresh_message(due).encode(), priority)
