"""One Database per process: a worker's every store shares its one engine, and a database error comes
out as a one-line SinkError."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
import yaml

from crawler.config import load_config
from crawler.errors import ConfigError, SinkError
from crawler.sink import database
from crawler.sink.crawls import CrawlStore
from crawler.sink.database import Database
from crawler.sink.schedule import Schedule
from crawler.sink.sql import PageRecord, Sink, migrate
from crawler.worker import wiring
from tests.support.crawls import stored
from tests.support.fresh import Page, fresh_site, html, serving
from tests.support.services import settings_for


def counting_engines(monkeypatch: pytest.MonkeyPatch) -> list[sa.Engine]:
    """Every engine (so every pool) the crawler makes from now on, as it makes them."""
    made: list[sa.Engine] = []
    real = sa.create_engine

    def create_engine(*args: Any, **kwargs: Any) -> sa.Engine:
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(database, "create_engine", create_engine)
    return made


async def test_a_consume_run_uses_one_engine(
    amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = fresh_site("a.test", "127.0.0.21")
    site.pages["/"] = Page(html("home", "start", [site.url("/b")]))
    site.pages["/b"] = Page(html("b", "second page"))
    site.pages["/robots.txt"] = Page(b"User-agent: *\nAllow: /\n", content_type="text/plain")
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "rate": 500, "burst": 100},
                "resolve": {site.host: site.ip},
                "allow_private_networks": True,
                "domains": {site.host: {}},
            }
        )
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    engines = counting_engines(monkeypatch)
    with serving(site):
        await wiring.consume(settings, load_config(config_path), burst=True, seeds=[site.url()])
    # Migration, dedup recovery, the sink, sitemaps, the schedule, domain state, crawl records: one pool.
    assert len(engines) == 1
    assert {row[0] for row in stored(sqlite_url)} == {site.url(), site.url("/b")}


def test_stores_share_the_database_engine(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    engines = counting_engines(monkeypatch)
    with Database(sqlite_url) as db:
        migrate(db)
        assert Sink(db).counts() == {}
        assert CrawlStore(db).list() == []
        assert Schedule(db).backlog(["a.test"], datetime.now(UTC)) == {}
        assert engines == [db.engine]


async def test_a_database_error_is_one_line_sink_error(database_url: str) -> None:
    with Database(database_url) as db:  # never migrated: no table
        with pytest.raises(SinkError) as listing:
            CrawlStore(db).list()
        assert str(listing.value).startswith(f"crawl records in {db.redacted}: ")
        with pytest.raises(SinkError) as storing:
            await Sink(db).store(PageRecord(url="https://a.test/", domain="a.test", depth=0, attempts=1))
        assert str(storing.value).startswith(f"storing 1 page(s) in {db.redacted} failed: ")
        pool = db.engine.pool
        with pytest.raises(SinkError) as caught, db.errors("reading nothing"), db.engine.connect() as conn:
            conn.exec_driver_sql("SELECT no_column FROM no_table")
        assert db.engine.pool is pool  # kept: only a failed write starts afresh
    for error in (listing.value, storing.value, caught.value):
        assert "\n" not in str(error)
        assert isinstance(error.__cause__, sa.exc.DBAPIError)
    assert str(caught.value).startswith("reading nothing: ")
    assert "no_table" in str(caught.value)


def test_a_failed_write_starts_a_fresh_pool(sqlite_url: str) -> None:
    with Database(sqlite_url) as db:
        pool = db.engine.pool
        with pytest.raises(SinkError), db.errors("writing", reset=True), db.engine.begin() as conn:
            conn.exec_driver_sql("INSERT INTO no_table VALUES (1)")
        assert db.engine.pool is not pool


def test_a_bad_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unsupported database"):
        Database("mysql://u:sekret@127.0.0.1/x")
