"""What a page's final answer means for its row and its schedule: new, changed, unchanged or gone.

A refresh (a stored page fetched again on its schedule) found unchanged (a 304, or a 200 whose
signature is the stored one) keeps its row's content and status: only the time, the validators and
the schedule move, and its links are not routed (they were, when it changed). A changed page is
stored anew and its links routed: new URLs are crawled, known ones keep their own schedule (the
crawl's dedup store knows them). A page now gone (404, 410), or failing for good, keeps its last
content, takes the new status, and stays on its schedule until `drop_after` gone answers in a row;
one that answers again is changed (back), whatever its signature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from crawler.config import Recrawl
from crawler.frontier.message import Refresh
from crawler.frontier.recrawl import GONE, Found, schedule
from crawler.sink.sql import ARCHIVE_COLUMNS, CONTENT_COLUMNS
from crawler.visited import Scheduled
from crawler.worker.page import Visit

How = Literal["new", "changed", "not_modified", "same_signature", "gone", "failed"]
"""How a fetch found its page, as counted (crawler_refreshes_total counts all but "new")."""

# Columns a refresh leaves as they were: the content, when it is unchanged or gone...
# Its archived answer (ARCHIVE_COLUMNS) is the one its kept content was read from.
CONTENT = (
    frozenset(
        {"final_url", "content_type", "title", "data", "expectations", "signature", "changed_at", "rendered"}
    )
    | ARCHIVE_COLUMNS
    | CONTENT_COLUMNS
)
# ... and, unchanged, its status too.
UNCHANGED = CONTENT | {"status_code", "error"}


@dataclass(frozen=True, slots=True)
class Settled:
    """A page's schedule as its row keeps it, how its fetch found it, and whether its links are routed."""

    scheduled: Scheduled
    found: Found
    how: How
    route: bool


def settle(visit: Visit, refresh: Refresh | None, recrawl: Recrawl | None) -> Settled:
    """The schedule of a page after its final answer (`recrawl`: its settings, None if off)."""
    visited = visit.visited
    status, validators = visited.answered.status_code, visited.validators
    now = visited.task.fetched_at
    if refresh is None:
        found: Found = "gone" if status in GONE else "new"
        how: How = "gone" if found == "gone" else "new"
        keep: frozenset[str] = frozenset()
    elif validators.not_modified:
        found, how, keep = "unchanged", "not_modified", UNCHANGED
    elif status in GONE:
        found, how, keep = "gone", "gone", CONTENT
    elif visit.failure is not None:
        found, how, keep = "failed", "failed", CONTENT
    elif refresh.unchanged(validators.signature):
        found, how, keep = "unchanged", "same_signature", UNCHANGED
    else:
        found, how, keep = "changed", "changed", frozenset()
    after = schedule(
        recrawl,
        now,
        found,
        refresh.interval if refresh is not None else None,
        refresh.gone if refresh is not None else 0,
        validators.max_age,
    )
    old = refresh or Refresh()
    stays = found in ("unchanged", "gone", "failed")  # a 304 may name new validators; else these stay
    scheduled = Scheduled(
        etag=validators.etag or (old.etag if stays else None),
        last_modified=validators.last_modified or (old.last_modified if stays else None),
        signature=validators.signature,
        changed_at=now if found in ("new", "changed") else None,
        found=how,
        fetch_interval=after.interval if after is not None else None,
        next_fetch_at=after.at if after is not None else None,
        gone=after.gone if after is not None else int(found == "gone"),
        keep=keep,
    )
    # A first fetch routes what it found, failed or not, as ever; a refresh only once it changed.
    return Settled(scheduled, found, how, route=refresh is None or found == "changed")
