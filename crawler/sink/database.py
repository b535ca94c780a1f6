"""The database a process uses: one engine (one connection pool) built once from its URL, shared by
every store, and its errors said as one-line SinkErrors."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError

from crawler.errors import ConfigError, CrawlerError, SinkError

# How long a SQLite connection waits for another process's lock before giving up.
SQLITE_BUSY_TIMEOUT_MS = 30_000


def engine_url(database_url: str) -> URL:
    """Parse a database URL, pointing plain `postgresql://` at psycopg 3 (the installed driver)."""
    try:
        url = make_url(database_url)
    except ArgumentError as exc:
        raise ConfigError(f"invalid database URL: {exc}") from None
    if url.drivername == "postgresql":
        url = url.set(drivername="postgresql+psycopg")
    if url.get_backend_name() not in ("sqlite", "postgresql"):
        supported = "use sqlite:///PATH or postgresql://"
        raise ConfigError(f"unsupported database {redacted(url)!r}: {supported}")
    return url


def redacted(url: URL) -> str:
    """The URL as said in messages: its password hidden."""
    return url.render_as_string(hide_password=True)


def create_sink_engine(url: URL) -> Engine:
    """An engine for `url`; SQLite connections get WAL, a busy timeout and write-locking BEGINs."""
    engine = create_engine(url)
    if url.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_on_connect)
        event.listen(engine, "begin", _sqlite_on_begin)
    return engine


def _sqlite_on_connect(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # busy_timeout first: switching to WAL needs a lock another process may hold.
    cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
    _switch_to_wal(cursor)
    cursor.execute("PRAGMA synchronous = NORMAL")
    cursor.close()
    # Let SQLAlchemy emit BEGIN itself (below) instead of sqlite3's implicit, deferred one.
    dbapi_connection.isolation_level = None


def _switch_to_wal(cursor: Any) -> None:
    # SQLite answers "database is locked" at once, without the busy timeout, when two
    # processes open a new database together and both try to switch it to WAL (one holds
    # a shared lock while waiting for the other's); waiting and trying again resolves it.
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def _sqlite_on_begin(conn: Connection) -> None:
    # IMMEDIATE takes the write lock up front, where the busy timeout applies; a deferred
    # transaction that upgrades later can fail with SQLITE_BUSY without waiting.
    conn.exec_driver_sql("BEGIN IMMEDIATE")


def first_line(exc: DBAPIError) -> str:
    """The first line of a database error's own message, for a one-line SinkError."""
    text = str(exc.orig).strip() or type(exc.orig).__name__
    return text.splitlines()[0]


class Database:
    """One process's database: its URL parsed once, and one engine every store shares; close it once."""

    def __init__(self, database_url: str) -> None:
        self.url = engine_url(database_url)
        self.redacted = redacted(self.url)
        self.backend = self.url.get_backend_name()
        self.dialect: Any = postgresql if self.backend == "postgresql" else sqlite
        self.engine = create_sink_engine(self.url)

    @contextmanager
    def errors(
        self, what: str, *, error: type[CrawlerError] = SinkError, reset: bool = False
    ) -> Iterator[None]:
        """A database error inside raised as `error` saying `what`, then the error's first line; with
        `reset`, the pooled connections are dropped first."""
        try:
            yield
        except DBAPIError as exc:
            if reset:
                # Pooled sessions keep what the database was when they opened (PostgreSQL's
                # default_transaction_read_only, say): after a failure, the next use opens fresh ones.
                self.engine.dispose()
            raise error(f"{what}: {first_line(exc)}") from exc

    def close(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()

    def __enter__(self) -> Database:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


@contextmanager
def opened(database: Database | str) -> Iterator[Database]:
    """The process's `database`; given a URL, one for this use alone, closed after it."""
    if isinstance(database, Database):
        yield database
        return
    with Database(database) as own:
        yield own
