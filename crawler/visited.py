"""What a visit found of a page, apart from its row: the worker makes it, the sink maps it to a row."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from crawler.archive import Archived


def utcnow() -> datetime:
    """Now, timezone-aware (UTC)."""
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class PageTask:
    """The page a delivery asks for: its URL and domain, depth, try, crawl, and when it was taken up."""

    url: str
    domain: str
    depth: int
    attempts: int
    crawl: str | None = None  # None: the default crawl
    history: bool = False  # its domain keeps versions (crawler/sink/versions.py)
    fetched_at: datetime = field(default_factory=utcnow)


@dataclass(frozen=True, slots=True)
class Answered:
    """What the server answered: where it ended, its status and type, what the fetch cost, its archive."""

    final_url: str | None = None
    status_code: int | None = None
    content_type: str | None = None
    credits: float = 0.0  # what the fetch service charged (direct: 0)
    exit_id: str | None = None  # the fetch service's exit that carried it, by id (never its URL)
    rendered: bool = False  # a browser ran the page's scripts and the parser read the rendered DOM
    archived: Archived | None = None  # where its records are in the WARC archive


@dataclass(frozen=True, slots=True)
class MadeContent:
    """A page's content (docs/content.md) as the worker made it, or why its body was refused."""

    markdown: str | None = None
    text: str | None = None
    lang: str | None = None
    simhash: int | None = None
    near_duplicate_of: str | None = None
    content_refused: str | None = None  # a Refusal code


@dataclass(frozen=True, slots=True)
class Validators:
    """What an answer says of the page's freshness: its validators, its content's signature (None if
    not asked for), how long its server calls it fresh, and whether it was a 304 to a refresh."""

    etag: str | None = None
    last_modified: str | None = None
    signature: str | None = None
    max_age: float | None = None
    not_modified: bool = False


@dataclass(frozen=True, slots=True)
class Visited:
    """A visited page: its answer (none if it was not fetched), its error, what its extraction read,
    the expectations its data failed, its content and its validators."""

    task: PageTask
    answered: Answered = Answered()
    error: str | None = None
    title: str | None = None
    data: dict[str, Any] | None = None
    expectations: list[dict[str, str]] | None = None  # each {"name", "reason"}; None: none failed
    content: MadeContent | None = None  # None: none made
    validators: Validators = Validators()


@dataclass(frozen=True, slots=True)
class Scheduled:
    """A visited page's schedule (crawler/frontier/recrawl.py): the validators to send next time, what
    its content was, when it last changed, its interval, when it is due (None: not scheduled), gone
    answers, and the columns whose stored value stays (a refresh that found it unchanged, or gone)."""

    etag: str | None = None
    last_modified: str | None = None
    signature: str | None = None
    changed_at: datetime | None = None
    found: str | None = None  # what its fetch found: new, changed, not_modified, same_signature, ...
    fetch_interval: float | None = None
    next_fetch_at: datetime | None = None
    gone: int = 0
    keep: frozenset[str] = frozenset()
