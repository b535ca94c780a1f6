"""A visited page's row: what the sink stores of what a visit found and of the schedule it set."""

from __future__ import annotations

from crawler.sink.sql import PageRecord
from crawler.visited import MadeContent, Scheduled, Visited

_NO_CONTENT = MadeContent()


def row_of(visited: Visited, scheduled: Scheduled) -> PageRecord:
    """The page's row: its visit's answer, reading and content, under its schedule."""
    task, answered = visited.task, visited.answered
    content = visited.content or _NO_CONTENT
    return PageRecord(
        url=task.url,
        domain=task.domain,
        depth=task.depth,
        attempts=task.attempts,
        final_url=answered.final_url,
        status_code=answered.status_code,
        content_type=answered.content_type,
        error=visited.error,
        title=visited.title,
        data=visited.data,
        fetched_at=task.fetched_at,
        credits=answered.credits,
        exit_id=answered.exit_id,
        crawl=task.crawl,
        rendered=answered.rendered,
        etag=scheduled.etag,
        last_modified=scheduled.last_modified,
        signature=scheduled.signature,
        changed_at=scheduled.changed_at,
        found=scheduled.found,
        fetch_interval=scheduled.fetch_interval,
        next_fetch_at=scheduled.next_fetch_at,
        gone=scheduled.gone,
        keep=scheduled.keep,
        history=task.history,
        archived=answered.archived,
        markdown=content.markdown,
        text=content.text,
        lang=content.lang,
        simhash=content.simhash,
        near_duplicate_of=content.near_duplicate_of,
        content_refused=content.content_refused,
        expectations=visited.expectations,
    )
