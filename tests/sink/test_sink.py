"""The SQL sink against real SQLite and PostgreSQL databases."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.migration import MigrationContext
from sqlalchemy import DateTime, bindparam, inspect, select, text

import crawler
from crawler.errors import ServiceUnavailable, SinkError
from crawler.sink.database import Database
from crawler.sink.sql import (
    CONTENT_COLUMNS,
    PageRecord,
    Sink,
    create_sink_engine,
    engine_url,
    migrate,
    migrations_dir,
)
from crawler.sink.tables import Base, Page


@pytest.fixture
def sink(database_url: str) -> Iterator[Sink]:
    migrate(database_url)
    s_db = Database(database_url)
    s = Sink(s_db)
    yield s
    s_db.close()


def rows(database_url: str) -> list[dict[str, Any]]:
    """Every row of `pages`, by url; SQLite hands back naive datetimes, so make them UTC."""
    engine = create_sink_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            found = [dict(r._mapping) for r in conn.execute(select(Page.__table__).order_by(Page.url))]
    finally:
        engine.dispose()
    for row in found:
        if row["fetched_at"].tzinfo is None:
            row["fetched_at"] = row["fetched_at"].replace(tzinfo=UTC)
    return found


def record(url: str, **fields: Any) -> PageRecord:
    return PageRecord(
        url=url, domain=fields.pop("domain", "example.com"), **{"depth": 0, "attempts": 1, **fields}
    )


def test_migrate_creates_the_table_and_is_idempotent(database_url: str) -> None:
    migrate(database_url)
    migrate(database_url)
    engine = create_sink_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            inspector = inspect(conn)
            assert {c["name"] for c in inspector.get_columns("pages")} == set(Page.__table__.c.keys())
            assert [i["name"] for i in inspector.get_indexes("pages") if i["column_names"] == ["domain"]] == [
                "ix_pages_domain"
            ]
            assert conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all() == ["0014"]
            # The migration and the model describe the same schema.
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()


def test_upgrading_gives_each_sitemap_origin_its_time_to_be_looked_at(database_url: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    read = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    engine = create_sink_engine(engine_url(database_url))
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "0013")
            conn.execute(
                text("INSERT INTO sitemap_origins (origin, domain, round_at) VALUES (:o, :d, :r)").bindparams(
                    bindparam("r", type_=DateTime(timezone=True))
                ),
                {"o": "http://a.test", "d": "a.test", "r": read},
            )
    finally:
        engine.dispose()
    migrate(database_url)
    engine = create_sink_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            due = conn.execute(
                text("SELECT due_at FROM sitemap_origins").columns(due_at=DateTime(timezone=True))
            ).scalar_one()
    finally:
        engine.dispose()
    assert (due if due.tzinfo else due.replace(tzinfo=UTC)) == read  # SQLite keeps no zone


async def test_storing_a_url_again_updates_its_row(sink: Sink, database_url: str) -> None:
    await sink.store(record("https://example.com/a", error="timeout", attempts=1))
    when = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    await sink.store(
        record(
            "https://example.com/a",
            attempts=2,
            status_code=200,
            final_url="https://example.com/a/",
            content_type="text/html",
            title="A",
            data={"price": "3", "sku": None},
            fetched_at=when,
        )
    )
    [row] = rows(database_url)
    assert row["error"] is None
    assert row["attempts"] == 2
    assert row["status_code"] == 200
    assert row["final_url"] == "https://example.com/a/"
    assert row["title"] == "A"
    assert row["data"] == {"price": "3", "sku": None}
    assert row["fetched_at"] == when


async def test_a_page_s_content_is_stored_and_kept_by_an_unchanged_refresh(
    sink: Sink, database_url: str
) -> None:
    content = {
        "markdown": "# Title\n\nBody \x00 [link](https://example.com/b)",
        "text": "Title\nBody",
        "lang": "en",
        "simhash": (1 << 64) - 1,  # past a signed 64-bit integer: stored as hex
        "near_duplicate_of": "https://mirror.example/a",
    }
    await sink.store(record("https://example.com/a", **content))
    await sink.store(record("https://example.com/d.pdf", content_refused="encrypted"))
    a, pdf = rows(database_url)
    assert a["markdown"] == "# Title\n\nBody \ufffd [link](https://example.com/b)"  # no NUL
    assert (a["text"], a["lang"], a["simhash"]) == ("Title\nBody", "en", "f" * 16)
    assert (a["near_duplicate_of"], a["content_refused"]) == ("https://mirror.example/a", None)
    assert pdf["content_refused"] == "encrypted" and pdf["text"] is None
    await sink.store(record("https://example.com/a", keep=CONTENT_COLUMNS))
    assert rows(database_url)[0]["markdown"] == a["markdown"]


async def test_duplicate_urls_in_one_batch_keep_the_last(sink: Sink, database_url: str) -> None:
    await sink.store_many(
        [
            record("https://example.com/a", title="first"),
            record("https://example.com/b"),
            record("https://example.com/a", title="last"),
        ]
    )
    found = rows(database_url)
    assert [r["url"] for r in found] == ["https://example.com/a", "https://example.com/b"]
    assert found[0]["title"] == "last"


async def test_counts_ok_and_failed_per_domain(sink: Sink) -> None:
    assert sink.counts() == {}
    await sink.store_many(
        [
            record("https://a.test/1", domain="a.test"),
            record("https://a.test/2", domain="a.test", error="404"),
            record("https://a.test/3", domain="a.test"),
            record("https://b.test/1", domain="b.test", error="timeout"),
        ]
    )
    assert sink.counts() == {"a.test": (2, 1), "b.test": (0, 1)}


async def test_two_sinks_writing_at_once_make_no_duplicates(database_url: str) -> None:
    migrate(database_url)
    # Two databases: two processes' pools.
    first_db, second_db = Database(database_url), Database(database_url)
    first, second = Sink(first_db), Sink(second_db)
    try:
        urls = [f"https://example.com/{i:03}" for i in range(75)]
        for attempt in range(10):
            # Overlapping batches in opposite orders: the worst case for locking.
            await asyncio.gather(
                first.store_many([record(u, attempts=attempt) for u in urls[:50]]),
                second.store_many([record(u, attempts=attempt) for u in reversed(urls[25:])]),
            )
        assert first.counts() == {"example.com": (75, 0)}
    finally:
        first_db.close()
        second_db.close()
    assert [r["url"] for r in rows(database_url)] == urls


async def test_concurrent_migrations_do_not_collide(database_url: str) -> None:
    # The children import first and say so, then wait on their stdin: released together, with two
    # migrations in this process, their migrations really overlap.
    code = (
        "import sys; from crawler.sink.sql import migrate; "
        "print('ready', flush=True); sys.stdin.readline(); migrate(sys.argv[1])"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(crawler.__file__).parent.parent)}
    children = [
        subprocess.Popen(
            [sys.executable, "-c", code, database_url],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(3)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert await asyncio.to_thread(child.stdout.readline) == "ready\n"
        for child in children:  # the barrier: all are waiting, release them at once
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.close()
        await asyncio.gather(
            *(asyncio.to_thread(child.wait, 60) for child in children),
            *(asyncio.to_thread(migrate, database_url) for _ in range(2)),
        )
        assert [child.returncode for child in children] == [0, 0, 0]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()
            if child.stdout is not None:
                child.stdout.close()
    assert rows(database_url) == []


def test_both_postgresql_url_spellings_work(pg_url: str) -> None:
    psycopg_url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    migrate(psycopg_url)
    for url in (pg_url, psycopg_url):
        sink_db = Database(url)
        sink = Sink(sink_db)
        try:
            assert sink.counts() == {}
        finally:
            sink_db.close()


def test_sqlite_connections_use_wal_and_wait_for_locks(sqlite_url: str) -> None:
    engine = create_sink_engine(engine_url(sqlite_url))
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
            assert conn.exec_driver_sql("PRAGMA busy_timeout").scalar() == 30000
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    finally:
        engine.dispose()


def test_switching_to_wal_waits_for_another_process_write_lock(sqlite_url: str) -> None:
    # The race of two consumers opening a new database at once, made deterministic: another
    # connection holds the write lock of a not-yet-WAL database, and releases it shortly.
    other = sqlite3.connect(
        str(engine_url(sqlite_url).database), isolation_level=None, check_same_thread=False
    )
    other.execute("CREATE TABLE t (x)")
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.2, other.execute, ("COMMIT",))
    release.start()
    engine = create_sink_engine(engine_url(sqlite_url))
    try:
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()
        release.join()
        other.close()


@pytest.mark.parametrize(
    "url", ["postgresql://postgres@127.0.0.1:1/x", "postgresql://u:sekret@127.0.0.1:1/x"]
)
def test_unreachable_database_is_service_unavailable(url: str) -> None:
    with pytest.raises(ServiceUnavailable) as caught:
        migrate(url)
    message = str(caught.value)
    assert "127.0.0.1:1" in message
    assert "\n" not in message
    assert "sekret" not in message


async def test_failed_write_is_sink_error_without_password() -> None:
    sink_db = Database("postgresql://u:sekret@127.0.0.1:1/x")
    sink = Sink(sink_db)
    try:
        with pytest.raises(SinkError) as caught:
            await sink.store(record("https://example.com/a"))
    finally:
        sink_db.close()
    assert "127.0.0.1:1" in str(caught.value)
    assert "sekret" not in str(caught.value)


def test_fetched_at_must_be_timezone_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        record("https://example.com/a", fetched_at=datetime(2024, 1, 1))


async def test_hostile_values_are_stored_not_retried_for_ever(sink: Sink, database_url: str) -> None:
    # PostgreSQL refuses NUL in text and a content type longer than its column: a row it cannot
    # store would be retried for ever, so the sink makes it storable.
    content_type = "text/html; x=" + "y" * 1000
    await sink.store(
        record(
            "https://example.com/nul",
            title="a\x00b",
            error="bad\x00byte",
            final_url="https://example.com/\x00",
            content_type=content_type,
            data={"f\x00": "v\x00"},
        )
    )
    [row] = rows(database_url)
    assert row["title"] == "a\ufffdb"
    assert row["error"] == "bad\ufffdbyte"
    assert row["final_url"] == "https://example.com/\ufffd"
    assert row["content_type"] == content_type[:255]
    assert row["data"] == {"f\ufffd": "v\ufffd"}
