"""The SQL sink: one row per crawled URL, upserted so that a re-crawl updates instead of adding."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Executable, func, select

import crawler
from crawler.archive import Archived
from crawler.errors import ConfigError, ServiceUnavailable
from crawler.sink import versions
from crawler.sink.database import Database, opened
from crawler.sink.database import create_sink_engine as create_sink_engine
from crawler.sink.database import engine_url as engine_url
from crawler.sink.tables import (
    CONTENT,
    CONTENT_TYPE_LENGTH,
    ETAG_LENGTH,
    EXIT_ID_LENGTH,
    LANG_LENGTH,
    LAST_MODIFIED_LENGTH,
    REFUSAL_LENGTH,
    Page,
)
from crawler.sink.versions import Version
from crawler.visited import utcnow

# Alembic keeps its running context in module globals, so one process migrates one at a time;
# other processes are kept apart by the database lock taken in migrations/env.py.
_MIGRATING = threading.Lock()


@dataclass(frozen=True, slots=True)
class PageRecord:
    """The outcome of crawling one URL; `error` is None on success."""

    url: str
    domain: str
    depth: int
    attempts: int
    final_url: str | None = None
    status_code: int | None = None
    content_type: str | None = None
    error: str | None = None
    title: str | None = None
    data: dict[str, Any] | None = None
    fetched_at: datetime = field(default_factory=utcnow)
    credits: float = 0.0  # what the fetch service charged for the last attempt (direct: 0)
    exit_id: str | None = None  # the fetch service's exit that carried it, by id (never its URL)
    crawl: str | None = None  # the crawl that stored it; None: the default crawl
    rendered: bool = False  # a browser ran the page's scripts and the parser read the rendered DOM
    # Its schedule (crawler/frontier/recrawl.py): the validators to send next time, what its content
    # was, when it last changed, its interval, when it is due (None: not scheduled), gone answers.
    etag: str | None = None
    last_modified: str | None = None
    signature: str | None = None
    changed_at: datetime | None = None
    found: str | None = None  # what its last fetch found: new, changed, not_modified, same_signature, ...
    fetch_interval: float | None = None
    next_fetch_at: datetime | None = None
    gone: int = 0
    # Columns whose stored value stays: a refresh that found the page unchanged, or gone, leaves
    # its content (and, unchanged, its status) as they were.
    keep: frozenset[str] = frozenset()
    history: bool = False  # its domain keeps versions (crawler/sink/versions.py)
    archived: Archived | None = None  # where its answer's records are in the WARC archive
    # Its content (docs/content.md), with `content:` on: None where not made.
    markdown: str | None = None
    text: str | None = None
    lang: str | None = None
    simhash: int | None = None
    near_duplicate_of: str | None = None
    content_refused: str | None = None  # a Refusal code: why its body was not made into content
    # The expectations its data failed, each {"name", "reason"} (crawler/quality/); None: none.
    expectations: list[dict[str, str]] | None = None

    def __post_init__(self) -> None:
        # SQLite drops the offset when storing, so a naive or non-UTC time would be stored wrong.
        if self.fetched_at.tzinfo is None:
            raise ValueError("PageRecord.fetched_at must be timezone-aware")


def clean_text(value: str | None, limit: int | None = None) -> str | None:
    """Text a server sent, storable: no NUL (PostgreSQL refuses it), at most `limit` characters."""
    # An unstorable row would be retried for ever.
    if value is None:
        return None
    return value.replace("\x00", "\ufffd")[:limit]


def clean_json(value: Any) -> Any:
    # Fields are text, numbers, lists and groups now: clean the text wherever it sits.
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(str(k)) or "": clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def _record_row(record: PageRecord) -> dict[str, Any]:
    data = record.data and clean_json(record.data)
    return {
        "url": clean_text(record.url),
        "final_url": clean_text(record.final_url),
        "domain": record.domain,
        "status_code": record.status_code,
        "content_type": clean_text(record.content_type, CONTENT_TYPE_LENGTH),
        "error": clean_text(record.error),
        "depth": record.depth,
        "title": clean_text(record.title),
        "data": data,
        "expectations": record.expectations or None,
        "fetched_at": record.fetched_at.astimezone(UTC),
        "attempts": record.attempts,
        "credits": record.credits,
        "exit_id": clean_text(record.exit_id, EXIT_ID_LENGTH),
        "crawl_id": record.crawl,
        "rendered": record.rendered,
        "etag": clean_text(record.etag, ETAG_LENGTH),
        "last_modified": clean_text(record.last_modified, LAST_MODIFIED_LENGTH),
        "signature": record.signature,
        "changed_at": record.changed_at and record.changed_at.astimezone(UTC),
        "found": record.found,
        "fetch_interval": record.fetch_interval,
        "next_fetch_at": record.next_fetch_at and record.next_fetch_at.astimezone(UTC),
        "gone": record.gone,
        "version": None,
        **archive_columns(record.archived),
        **content_columns(record),
    }


CONTENT_COLUMNS = frozenset(CONTENT)


def simhash_hex(simhash: int | None) -> str | None:
    """How `pages.simhash` holds a simhash: 16 hex digits."""
    return None if simhash is None else f"{simhash:016x}"


def content_columns(record: PageRecord) -> dict[str, Any]:
    """The `pages` columns of a row's content."""
    return {
        "markdown": clean_text(record.markdown),
        "text": clean_text(record.text),
        "lang": clean_text(record.lang, LANG_LENGTH),
        "simhash": simhash_hex(record.simhash),
        "near_duplicate_of": clean_text(record.near_duplicate_of),
        "content_refused": clean_text(record.content_refused, REFUSAL_LENGTH),
    }


ARCHIVE_COLUMNS = frozenset({"warc_file", "warc_offset", "warc_length", "warc_digest", "warc_date"})


def archive_columns(archived: Archived | None) -> dict[str, Any]:
    """The `pages.warc_*` columns of a row whose answer is at `archived`."""
    if archived is None:
        return dict.fromkeys(ARCHIVE_COLUMNS)
    return {
        "warc_file": archived.file,
        "warc_offset": archived.offset,
        "warc_length": archived.length,
        "warc_digest": archived.digest,
        "warc_date": archived.date,
    }


# A row that makes no new version keeps its page's latest version number.
_NO_VERSION = frozenset({"version"})


class Sink:
    """Writes PageRecords to SQLite or PostgreSQL; blocking work runs in a thread."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._engine = database.engine
        self._dialect = database.dialect
        self._upserts: dict[frozenset[str], Any] = {}

    def _upsert(self, keep: frozenset[str]) -> Any:
        """The upsert of a row, leaving the stored value of the columns in `keep` as it is."""
        upsert = self._upserts.get(keep)
        if upsert is None:
            stmt = self._dialect.insert(Page)
            updated = [c.name for c in Page.__table__.c if c.name not in ("id", "url", *keep)]
            upsert = self._upserts[keep] = stmt.on_conflict_do_update(
                index_elements=[Page.url], set_={name: stmt.excluded[name] for name in updated}
            )
        return upsert

    async def store(self, record: PageRecord) -> Version | None:
        """Insert or update one page; the version it made, if any."""
        return (await self.store_many([record])).get(record.url)

    async def store_many(self, records: Sequence[PageRecord]) -> dict[str, Version]:
        """Insert or update pages in one transaction; of records sharing a url, the last wins.
        Per url, the version it made (of records whose domain keeps history)."""
        if not records:
            return {}
        return await asyncio.to_thread(self._store_many, records)

    def _store_many(self, records: Sequence[PageRecord]) -> dict[str, Version]:
        # PostgreSQL refuses to update one row twice in a statement, so dedupe; sorting gives
        # concurrent writers the same lock order, which prevents deadlocks between them.
        latest = {r.url: r for r in records}
        ordered = [(latest[url], _record_row(latest[url])) for url in sorted(latest)]
        failed = f"storing {len(ordered)} page(s) in {self._db.redacted} failed"
        with self._db.errors(failed, reset=True), self._engine.begin() as conn:
            # Unchanged refreshes (most of them) need no look at their versions.
            kept = [(row, r.keep) for r, row in ordered if r.history and versions.may_make(row, r.keep)]
            planned = versions.plan(kept, versions.latest(conn, [row["url"] for row, _ in kept]))
            groups: dict[frozenset[str], list[dict[str, Any]]] = {}
            for record, row in ordered:
                made = planned.get(record.url)
                if made is not None:
                    row["version"] = made.number
                keep = record.keep if made is not None else record.keep | _NO_VERSION
                groups.setdefault(keep, []).append(row)
            for keep, group in groups.items():
                conn.execute(self._upsert(keep), group)
            return versions.write(conn, planned)

    async def versions_after(self, url: str, number: int) -> list[Version]:
        """The versions of the page at `url` newer than `number`, oldest first (to announce again)."""
        return await asyncio.to_thread(self._versions_after, url, number)

    def _versions_after(self, url: str, number: int) -> list[Version]:
        with (
            self._db.errors(f"reading versions in {self._db.redacted} failed"),
            self._engine.connect() as conn,
        ):
            return versions.after(conn, url, number)

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per domain, the number of (successful, failed) pages."""
        stmt = select(Page.domain, func.count() - func.count(Page.error), func.count(Page.error))
        rows = self._rows(stmt.group_by(Page.domain), "counting pages")
        return {domain: (ok, failed) for domain, ok, failed in rows}

    def credits(self) -> dict[str, float]:
        """Per domain, the credits its pages' last attempts were charged."""
        stmt = select(Page.domain, func.coalesce(func.sum(Page.credits), 0.0))
        rows = self._rows(stmt.group_by(Page.domain), "summing credits")
        return {domain: float(total) for domain, total in rows}

    def counts_since(self, since: datetime) -> dict[str, int]:
        """Per domain, the number of pages fetched at or after `since` (timezone-aware)."""
        stmt = select(Page.domain, func.count()).where(Page.fetched_at >= since.astimezone(UTC))
        rows = self._rows(stmt.group_by(Page.domain), "counting pages")
        return {domain: n for domain, n in rows}

    def _rows(self, stmt: Executable, doing: str) -> Sequence[Any]:
        with self._db.errors(f"{doing} in {self._db.redacted} failed"), self._engine.connect() as conn:
            return conn.execute(stmt).all()


def migrations_dir() -> Path:
    """The Alembic scripts: packaged inside the wheel, else next to the source tree."""
    packaged = Path(crawler.__file__).parent / "_migrations"
    if packaged.is_dir():
        return packaged
    return Path(crawler.__file__).parent.parent / "migrations"


def _alembic() -> Config:
    config = Config()
    # configparser would treat '%' as interpolation, hence the escape.
    config.set_main_option("script_location", str(migrations_dir()).replace("%", "%%"))
    return config


def check_schema(database: Database | str) -> None:
    """ConfigError unless the database exists with the newest schema: a command that only reads
    creates neither (a SQLite file in the wrong folder, a schema nobody upgraded)."""
    with opened(database) as db:
        fix = "run `crawler db upgrade` (or set CRAWLER_DATABASE_URL to the crawl's database)"
        file = db.url.database if db.backend == "sqlite" else None
        # Connecting makes an empty file where there was none (in a folder that exists: else it fails).
        if file and file != ":memory:" and Path(file).parent.is_dir() and not Path(file).exists():
            raise ConfigError(f"no database at {file}: {fix}")
        unreachable = f"cannot connect to database {db.redacted}"
        with db.errors(unreachable, error=ServiceUnavailable), db.engine.connect() as conn:
            current = MigrationContext.configure(conn).get_current_revision()
        scripts = ScriptDirectory.from_config(_alembic())
        if current is None:
            raise ConfigError(f"database {db.redacted} has no crawler schema: {fix}")
        known = {s.revision for s in scripts.walk_revisions()}
        if current in known and current != scripts.get_current_head():
            # A revision this version does not know is newer: reading it is the newer version's call.
            raise ConfigError(
                f"database {db.redacted} has an older schema ({current}): run `crawler db upgrade`"
            )


def migrate(database: Database | str) -> None:
    """Upgrade the database schema to the newest migration; safe to run concurrently."""
    config = _alembic()
    with opened(database) as db:
        with db.errors(f"cannot connect to database {db.redacted}", error=ServiceUnavailable):
            conn = db.engine.connect()
        with db.errors(f"migrating database {db.redacted} failed"), conn, conn.begin():
            # env.py runs inside this transaction and locks it (see there) until the commit.
            config.attributes["connection"] = conn
            with _MIGRATING:
                command.upgrade(config, "head")
