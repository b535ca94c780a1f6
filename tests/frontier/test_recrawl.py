"""When a stored page is due again: the interval policy and what a server's caching headers say."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from crawler.config import Recrawl
from crawler.frontier.recrawl import GROW, interval, max_age, schedule

HOUR, DAY = 3600.0, 86_400.0
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
RECRAWL = Recrawl(every=DAY, min=HOUR, max=10 * DAY, drop_after=2)


@pytest.mark.parametrize(
    ("previous", "found", "server", "expected"),
    [
        (None, "new", None, DAY),  # a new page: every
        (None, "new", 6 * HOUR, 6 * HOUR),  # its server says it expires sooner: sooner
        (None, "new", 60.0, HOUR),  # ... but never below min
        (None, "new", 30 * DAY, DAY),  # a longer max-age never lengthens it
        (DAY, "unchanged", None, DAY * GROW),  # unchanged: half as long again
        (8 * DAY, "unchanged", None, 10 * DAY),  # ... up to max
        (DAY, "changed", None, (DAY + HOUR) / 2),  # changed: halfway back to min
        (HOUR, "changed", None, HOUR),  # ... never below it
        (DAY, "gone", None, DAY),  # gone or failing: as it was
        (DAY, "failed", None, DAY),
        (100 * DAY, "unchanged", None, 10 * DAY),  # a stored interval out of edited bounds is brought in
    ],
)
def test_the_interval_adapts_to_what_the_page_did(
    previous: float | None, found: str, server: float | None, expected: float
) -> None:
    assert interval(RECRAWL, previous, found, server) == pytest.approx(expected)  # type: ignore[arg-type]


def test_without_adaptive_every_interval_is_every() -> None:
    fixed = Recrawl(every=DAY, adaptive=False)
    assert interval(fixed, 3 * DAY, "unchanged") == interval(fixed, 3 * DAY, "changed") == DAY


def test_a_page_gone_drop_after_times_in_a_row_leaves_the_schedule() -> None:
    first = schedule(RECRAWL, NOW, "gone", DAY, gone=0)
    assert first is not None and (first.gone, first.at) == (1, NOW + timedelta(days=1))
    second = schedule(RECRAWL, NOW, "gone", DAY, gone=first.gone)
    assert second is not None and (second.gone, second.at) == (2, None)  # dropped
    back = schedule(RECRAWL, NOW, "unchanged", DAY, gone=1)
    assert back is not None and back.gone == 0 and back.at is not None  # any other answer resets it
    assert schedule(None, NOW, "changed", DAY) is None  # not recrawled: no schedule


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"cache-control": "public, max-age=600"}, 600.0),
        ({"cache-control": 'max-age="90", must-revalidate'}, 90.0),
        ({"cache-control": "no-cache"}, 0.0),
        ({"cache-control": "private, no-store"}, 0.0),
        ({"expires": "Fri, 04 Dec 2026 13:00:00 GMT", "date": "Fri, 04 Dec 2026 12:00:00 GMT"}, 3600.0),
        ({"expires": "0", "date": "Fri, 04 Dec 2026 12:00:00 GMT"}, 0.0),  # unreadable: expired
        ({"expires": "Fri, 04 Dec 2026 13:00:00 GMT"}, None),  # no Date to measure from
        ({}, None),
    ],
)
def test_how_long_a_server_calls_its_answer_fresh(headers: dict[str, str], expected: float | None) -> None:
    assert max_age(headers) == expected
