"""A visited page's row: every column from its visit or its schedule."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from crawler.archive import Archived
from crawler.sink.sql import PageRecord
from crawler.sink.visits import row_of
from crawler.visited import Answered, MadeContent, PageTask, Scheduled, Validators, Visited

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_row_takes_each_column_from_its_visit_or_its_schedule() -> None:
    task = PageTask("http://a.test/x", "a.test", 2, 3, crawl="c1", history=True, fetched_at=WHEN)
    archived = Archived("f.warc.gz", 10, 20, "sha1:X", "2026-01-02T03:04:05Z")
    answered = Answered("http://a.test/y", 200, "text/html", 1.5, "exit-1", True, archived)
    content = MadeContent("# T", "T", "en", 7, "http://a.test/z", None)
    # Validators are what the answer said; the row keeps its schedule's (a 304 may keep the old ones).
    validators = Validators(etag='"v"', last_modified="Mon", signature="s")
    visited = Visited(
        task, answered, None, "T", {"k": 1}, [{"name": "n", "reason": "r"}], content, validators
    )
    scheduled = Scheduled('"e"', "Tue", "sig", WHEN, "new", 60.0, WHEN, 0, frozenset({"title"}))
    row = row_of(visited, scheduled)
    assert row == PageRecord(
        url="http://a.test/x",
        domain="a.test",
        depth=2,
        attempts=3,
        final_url="http://a.test/y",
        status_code=200,
        content_type="text/html",
        title="T",
        data={"k": 1},
        fetched_at=WHEN,
        credits=1.5,
        exit_id="exit-1",
        crawl="c1",
        rendered=True,
        etag='"e"',
        last_modified="Tue",
        signature="sig",
        changed_at=WHEN,
        found="new",
        fetch_interval=60.0,
        next_fetch_at=WHEN,
        keep=frozenset({"title"}),
        history=True,
        archived=archived,
        markdown="# T",
        text="T",
        lang="en",
        simhash=7,
        near_duplicate_of="http://a.test/z",
        expectations=[{"name": "n", "reason": "r"}],
    )


def test_a_page_not_fetched_has_only_its_task_and_error() -> None:
    task = PageTask("http://a.test/x", "a.test", 0, 1, fetched_at=WHEN)
    row = row_of(Visited(task, error="disallowed"), Scheduled())
    empty = PageRecord("http://a.test/x", "a.test", 0, 1, error="disallowed", fetched_at=WHEN)
    assert dataclasses.asdict(row) == dataclasses.asdict(empty)
