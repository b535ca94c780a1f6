"""`crawler export`: JSON lines, CSV and Parquet from the sink, filtered, streamed in bounded memory."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import sqlite3
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from crawler.errors import ConfigError, NotFound
from crawler.sink.database import Database
from crawler.sink.export import COLUMNS, VERSION_COLUMNS, Query, export, parse_since
from crawler.sink.sql import PageRecord, Sink, migrate
from tests.support import versions
from tests.support.services import crawler_command

T0 = datetime(2024, 5, 1, 8, 0, tzinfo=UTC)
MB = 1024 * 1024


def records() -> list[PageRecord]:
    return [
        PageRecord(
            url="https://shop.test/p/1",
            domain="shop.test",
            depth=1,
            attempts=1,
            status_code=200,
            title="Lamp",
            data={"name": "Lamp", "price": 1299.0, "stock": 3, "tags": ["a", "b"], "title": "T"},
            fetched_at=T0,
            markdown="# Lamp\n\nA **brass** lamp.",
            text="Lamp\nA brass lamp.",
            lang="en",
        ),
        PageRecord(
            url="https://shop.test/p/2",
            domain="shop.test",
            depth=1,
            attempts=2,
            status_code=200,
            error="extraction: required field 'price' missing",
            data={"name": 'Desk, "oak"', "price": None, "stock": 1, "reviews": [{"a": "Ann", "r": 5}]},
            fetched_at=T0 + timedelta(hours=1),
        ),
        PageRecord(
            url="https://blog.test/",
            domain="blog.test",
            depth=0,
            attempts=1,
            status_code=404,
            error="HTTP 404",
            fetched_at=T0 + timedelta(hours=2),
        ),
    ]


async def fill(database_url: str) -> str:
    """`database_url` with the three pages of `records`."""
    migrate(database_url)
    sink_db = Database(database_url)
    sink = Sink(sink_db)
    try:
        await sink.store_many(records())
    finally:
        sink_db.close()
    return database_url


@pytest.fixture
async def filled(database_url: str) -> str:
    return await fill(database_url)


def test_jsonl(filled: str, tmp_path: Path) -> None:
    out = tmp_path / "pages.jsonl"
    assert export(filled, "jsonl", out, batch=2) == 3
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["url"] for r in rows] == sorted(r.url for r in records())  # stored in url order
    lamp = next(r for r in rows if r["url"].endswith("/1"))
    assert lamp["data"]["price"] == 1299.0 and lamp["data"]["tags"] == ["a", "b"]
    assert lamp["fetched_at"] == "2024-05-01T08:00:00+00:00"
    assert lamp["error"] is None and lamp["status_code"] == 200
    assert (lamp["markdown"], lamp["text"], lamp["lang"]) == (
        "# Lamp\n\nA **brass** lamp.",
        "Lamp\nA brass lamp.",
        "en",
    )


def test_dataset_is_one_record_per_page_with_content(filled: str, tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    assert export(filled, "jsonl", out, Query(dataset=True)) == 1  # the others have no content
    [record] = [json.loads(line) for line in out.read_text().splitlines()]
    markdown = "# Lamp\n\nA **brass** lamp."
    assert record == {
        "url": "https://shop.test/p/1",
        "title": "Lamp",
        "lang": "en",
        "markdown": markdown,
        "fetched_at": "2024-05-01T08:00:00+00:00",
        "digest": "sha256:" + hashlib.sha256(markdown.encode()).hexdigest(),
    }
    for fmt, query in (("csv", Query(dataset=True)), ("jsonl", Query(dataset=True, history=True))):
        with pytest.raises(ConfigError, match="--dataset"):
            export(filled, fmt, out, query)


def test_csv_has_a_column_per_field(filled: str, tmp_path: Path) -> None:
    out = tmp_path / "pages.csv"
    assert export(filled, "csv", out, Query(domain="shop.test"), batch=1) == 2
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    # Every field under one rule: `data.` and its name, a field named like a fixed column too.
    fields = ["data.name", "data.price", "data.stock", "data.tags", "data.title", "data.reviews"]
    assert list(rows[0])[-6:] == fields
    by_name = {r["data.name"]: r for r in rows}
    assert by_name["Lamp"]["data.price"] == "1299.0" and by_name["Lamp"]["data.tags"] == '["a", "b"]'
    assert by_name["Lamp"]["data.title"] == "T" and by_name["Lamp"]["title"] == "Lamp"
    desk = by_name['Desk, "oak"']
    assert desk["data.price"] == "" and json.loads(desk["data.reviews"]) == [{"a": "Ann", "r": 5}]
    assert desk["error"] == "extraction: required field 'price' missing"


async def test_csv_cells_a_spreadsheet_would_run_are_made_inert(sqlite_url: str, tmp_path: Path) -> None:
    migrate(sqlite_url)
    hostile = ['=HYPERLINK("http://evil.test","x")', "+1+1", "-2+3", "@SUM(A1)", "\tx", "\rx"]
    sink_db = Database(sqlite_url)
    sink = Sink(sink_db)
    try:
        await sink.store_many(
            [
                PageRecord(
                    url=f"https://shop.test/p/{i}",
                    domain="shop.test",
                    depth=1,
                    attempts=1,
                    status_code=200,
                    title=text,
                    data={"name": text, "price": -5.0, "=cmd": "ok"},
                    fetched_at=T0,
                )
                for i, text in enumerate(hostile)
            ]
        )
    finally:
        sink_db.close()
    out = tmp_path / "pages.csv"
    export(sqlite_url, "csv", out)
    with out.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted(r["data.name"] for r in rows) == sorted("'" + t for t in hostile)
    assert all(r["title"] == r["data.name"] for r in rows)
    assert {r["data.price"] for r in rows} == {"-5.0"}  # a number stays a number
    assert "data.=cmd" in rows[0]  # a field's name is a cell too: prefixed, it is inert


def test_parquet_has_typed_columns(filled: str, tmp_path: Path) -> None:
    out = tmp_path / "pages.parquet"
    assert export(filled, "parquet", out, batch=2) == 3
    table = pq.read_table(out)
    assert table.num_rows == 3
    assert str(table.schema.field("data.price").type) == "double"
    assert str(table.schema.field("data.stock").type) == "int64"
    assert str(table.schema.field("data.tags").type) == "string"
    assert str(table.schema.field("fetched_at").type) == "timestamp[us, tz=UTC]"
    rows = {r["url"]: r for r in table.to_pylist()}
    assert rows["https://shop.test/p/1"]["data.stock"] == 3
    assert rows["https://shop.test/p/1"]["fetched_at"] == T0
    assert rows["https://blog.test/"]["data.price"] is None


def test_filters(filled: str, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    assert export(filled, "jsonl", out, Query(domain="blog.test")) == 1
    assert export(filled, "jsonl", out, Query(since=T0 + timedelta(minutes=30))) == 2
    assert export(filled, "jsonl", out, Query("shop.test", T0 + timedelta(minutes=30))) == 1
    with pytest.raises(
        NotFound, match=r"--domain none.test: no page .* \(domains with pages: blog.test, shop.test\)"
    ):
        export(filled, "csv", out, Query(domain="none.test"))


def test_bad_requests_are_config_errors(sqlite_url: str) -> None:
    with pytest.raises(ConfigError, match="give --out FILE"):
        export(sqlite_url, "parquet", None)
    with pytest.raises(ConfigError, match="ISO 8601"):
        parse_since("last tuesday")
    assert parse_since("2024-05-01") == datetime(2024, 5, 1, tzinfo=UTC)


# -- 200,000 rows in bounded memory --------------------------------------------------------------


def fill_sqlite(path: Path, rows: int) -> None:
    migrate(f"sqlite:///{path}")
    data = {
        "name": "x" * 200,
        "price": 12.5,
        "stock": 7,
        "tags": ["lighting", "desk", "home"],
        "reviews": [{"author": "Ann", "rating": 5, "text": "y" * 120}],
    }
    blob = json.dumps(data)
    fetched = T0.isoformat(sep=" ")
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO pages (url, final_url, domain, status_code, content_type, error, depth, title,"
            " data, fetched_at, attempts) VALUES (?, ?, 'shop.test', 200, 'text/html', NULL, 1, ?, ?, ?, 1)",
            (
                (
                    f"https://shop.test/p/{i}",
                    f"https://shop.test/p/{i}",
                    f"Product {i} " + "t" * 80,
                    blob,
                    fetched,
                )
                for i in range(rows)
            ),
        )


def export_rss(db: Path, fmt: str, out: Path) -> tuple[int, float]:
    """Run `crawler export` in a process of its own: (peak resident bytes, seconds)."""
    env = {**os.environ, "CRAWLER_DATABASE_URL": f"sqlite:///{db}"}
    argv = crawler_command("crawler", "export", "--format", fmt, "--out", str(out))
    started = time.monotonic()
    with out.with_suffix(".stderr").open("w") as stderr:
        process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=stderr)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, out.with_suffix(".stderr").read_text()
    return usage.ru_maxrss * 1024, time.monotonic() - started


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("export")
    small, big = root / "small.db", root / "big.db"
    fill_sqlite(small, 2_000)
    fill_sqlite(big, 200_000)
    return {"small": small, "big": big}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_a_200000_row_table_exports_in_bounded_memory(
    tables: dict[str, Path], tmp_path: Path, fmt: str
) -> None:
    table_bytes = tables["big"].stat().st_size
    assert table_bytes > 100 * MB  # so a non-streaming export could not hide under the bound
    small_rss, _ = export_rss(tables["small"], fmt, tmp_path / f"small.{fmt}")
    big_rss, seconds = export_rss(tables["big"], fmt, tmp_path / f"big.{fmt}")
    peaks = f"2,000 rows {small_rss / MB:.0f} MB, 200,000 rows {big_rss / MB:.0f} MB"
    print(f"{fmt}: peak RSS {peaks}; {table_bytes / MB:.0f} MB table exported in {seconds:.1f}s")
    # A hundred times the rows, ~the same memory: growth is a fraction of the table's size.
    assert big_rss - small_rss < 40 * MB, (small_rss, big_rss)
    if fmt == "jsonl":
        with (tmp_path / "big.jsonl").open() as f:
            assert sum(1 for _ in f) == 200_000
    if fmt == "parquet":
        assert pq.ParquetFile(tmp_path / "big.parquet").metadata.num_rows == 200_000


def test_export_without_pyarrow_says_which_extra(tmp_path: Path, sqlite_url: str) -> None:
    migrate(sqlite_url)
    env = {**os.environ, "CRAWLER_DATABASE_URL": sqlite_url}
    # A module finder that refuses pyarrow stands in for an install without the extra.
    code = (
        "import sys; sys.modules['pyarrow'] = None; "
        f"sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r}); "
        "from crawler.cli import main; "
        f"sys.exit(main(['export', '--format', 'parquet', '--out', {str(tmp_path / 'x.parquet')!r}]))"
    )
    result = subprocess.run(
        [crawler_command("crawler")[0], "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "pip install -e '.[parquet]'" in result.stderr


# -- history: every version, and the pages changed since a time -----------------------------------


@pytest.fixture
async def versioned(database_url: str) -> str:
    await versions.store(database_url)
    return database_url


def jsonl(database_url: str, out: Path, query: Query) -> list[dict[str, Any]]:
    export(database_url, "jsonl", out, query, batch=2)
    return [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.timeout(60)
def test_history_lists_every_version_and_no_other(versioned: str, tmp_path: Path) -> None:
    rows = jsonl(versioned, tmp_path / "v.jsonl", Query(history=True))
    assert [(r["url"], r["version"], r["kind"], r["fetched_at"]) for r in rows] == [
        (url, number, kind, at.isoformat()) for url, number, kind, at in versions.VERSIONS
    ]
    assert list(rows[0]) == [*VERSION_COLUMNS, "data"]
    ids = {r["url"]: r["id"] for r in jsonl(versioned, tmp_path / "p.jsonl", Query())}
    assert all(r["page_id"] == ids[r["url"]] and r["domain"] == r["url"].split("/")[2] for r in rows)
    lamp = [r for r in rows if r["url"] == versions.LAMP]
    assert [r["crawl"] for r in lamp] == ["c1", "c2", None]
    assert lamp[1]["title"] == "a2 title" and lamp[1]["data"] == {"price": 2.0, "stock": 3, "sku": "a2"}
    gone = next(r for r in rows if r["kind"] == "gone")
    assert gone["status_code"] == 404 and gone["title"] is None and gone["data"] is None


@pytest.mark.timeout(60)
def test_history_filters_by_domain_and_by_the_versions_time(versioned: str, tmp_path: Path) -> None:
    out = tmp_path / "v.jsonl"
    blog = jsonl(versioned, out, Query(domain="blog.test", history=True))
    assert [(r["version"], r["kind"]) for r in blog] == [(1, "new"), (2, "gone"), (3, "back")]
    recent = jsonl(versioned, out, Query(since=T0 + timedelta(days=1), history=True))
    assert [(r["url"], r["version"]) for r in recent] == [
        (versions.BLOG, 2),
        (versions.LAMP, 2),
        (versions.BLOG, 3),
        (versions.LAMP, 3),
    ]


@pytest.mark.timeout(60)
def test_history_as_csv_and_parquet_has_the_data_fields(versioned: str, tmp_path: Path) -> None:
    assert export(versioned, "csv", tmp_path / "v.csv", Query(history=True), batch=3) == 7
    with (tmp_path / "v.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [*VERSION_COLUMNS, "data.price", "data.stock", "data.sku"]
    assert [r["data.sku"] for r in rows if r["url"] == versions.LAMP] == ["a1", "a2", "a3"]
    assert export(versioned, "parquet", tmp_path / "v.parquet", Query(history=True), batch=3) == 7
    table = pq.read_table(tmp_path / "v.parquet")
    types = {name: str(table.schema.field(name).type) for name in ("page_id", "version", "fetched_at")}
    assert types == {"page_id": "int64", "version": "int32", "fetched_at": "timestamp[us, tz=UTC]"}
    assert table.column("kind").to_pylist() == [kind for _, _, kind, _ in versions.VERSIONS]


@pytest.mark.timeout(60)
def test_changed_since_selects_the_pages_with_a_newer_version(versioned: str, tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"

    def changed(at: datetime, domain: str | None = None) -> list[str]:
        return [r["url"] for r in jsonl(versioned, out, Query(domain, changed_since=at))]

    # The desk's one version is at T0: newer than T0 means after it.
    assert changed(T0) == [versions.BLOG, versions.LAMP]  # page rows, in id order
    assert changed(T0 - timedelta(seconds=1)) == [versions.BLOG, versions.LAMP, versions.DESK]
    assert changed(T0 + timedelta(days=1, hours=12), "shop.test") == [versions.LAMP]
    assert changed(T0 + timedelta(days=2)) == []
    rows = jsonl(versioned, out, Query(changed_since=T0))
    assert list(rows[0]) == [*COLUMNS, "data"]  # the normal export's rows


@pytest.mark.timeout(60)
def test_the_command_takes_history_and_changed_since(versioned: str, tmp_path: Path) -> None:
    env = {**os.environ, "CRAWLER_DATABASE_URL": versioned}

    def crawler(*args: str) -> subprocess.CompletedProcess[str]:
        argv = crawler_command("crawler", "export", *args)
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)

    done = crawler("--history", "--domain", "shop.test", "--format", "csv", "--out", str(tmp_path / "v.csv"))
    assert done.returncode == 0 and done.stderr == f"4 versions written to {tmp_path / 'v.csv'}\n"
    done = crawler("--changed-since", "2024-05-02T08:00")
    assert done.returncode == 0, done.stderr
    assert [json.loads(line)["url"] for line in done.stdout.splitlines()] == [versions.BLOG, versions.LAMP]
    done = crawler("--changed-since", "yesterday")
    assert done.returncode == 2 and "--changed-since 'yesterday': expected an ISO 8601" in done.stderr
    done = crawler("--history", "--changed-since", "2024-05-02")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr
