"""The size of `page_versions` on PostgreSQL per million versions, and versions written per second.

python -m bench.history [--versions 1000000] [--pages 100000] [--records 50000] [--store-pages 5000]

Size: a fresh database (migrated as a crawl's is) gets `--pages` pages and `--versions` versions by
COPY, a version of every page per pass as recrawls write them (so the (page_id, version) index grows
out of order, as it does live), each a price record: a title of ~60 characters, four data fields, a
64-hex signature. It reports the heap, the rest of the table (TOAST, free space and visibility maps),
each index and pg_total_relation_size, in MB per million versions.

Rate: `--records` PageRecords over `--store-pages` of those pages go through Sink.store_many, batches
of 256, one writer, each record's signature new so each makes a version; then the same with history
off, for what history costs. Both into the filled database, then into a fresh one.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, LiteralString

import psycopg

from bench import services
from crawler.sink.database import Database
from crawler.sink.sql import PageRecord, Sink, migrate

BATCH = 256
MB = 1024 * 1024
WORDS = ("Oak", "Desk", "Lamp", "Brass", "Linen", "Walnut", "Chair", "Shelf", "Table", "Stool")


def _title(page: int, n: int) -> str:
    """A product title of about 60 characters."""
    words = " ".join(WORDS[(page + k * n) % len(WORDS)] for k in range(4))
    return f"{words} with drawer, model {page:06d}, {n % 5 + 1} colours - Shop"[:64]


def _data(page: int, n: int) -> dict[str, object]:
    return {
        "price": round(19.0 + (page * 7 + n * 13) % 500 + 0.99, 2),
        "currency": "EUR",
        "stock": (page + n) % 40,
        "sku": f"SKU-{page:07d}",
    }


def _signature(page: int, n: int) -> str:
    return hashlib.sha256(f"{page}:{n}".encode()).hexdigest()


def _fill(database_url: str, pages: int, versions: int) -> float:
    """`pages` pages and `versions` versions of them (a version of each page per pass); seconds."""
    started = time.monotonic()
    passes = versions // pages
    t0 = datetime.now(UTC) - timedelta(days=passes + 1)
    with psycopg.connect(database_url) as conn, conn.cursor() as cur:
        columns = "url, domain, depth, attempts, status_code, fetched_at, credits, rendered, gone, version"
        with cur.copy(f"COPY pages ({columns}) FROM STDIN") as copy:
            for i in range(pages):
                copy.write_row(
                    (f"https://shop.test/p/{i}.html", "shop.test", 2, 1, 200, t0, 0.0, False, 0, passes)
                )
        cur.execute("SELECT id FROM pages ORDER BY id")
        ids = [row[0] for row in cur.fetchall()]
        columns = "page_id, version, kind, fetched_at, status_code, signature, title, data, crawl_id"
        with cur.copy(f"COPY page_versions ({columns}) FROM STDIN") as copy:
            for n in range(1, passes + 1):
                crawl = hashlib.md5(str(n).encode()).hexdigest()[:16]  # a crawl id: 16 hex digits
                for i, page_id in enumerate(ids):
                    at = t0 + timedelta(days=n, seconds=i % 86_400)
                    copy.write_row(
                        (page_id, n, "new" if n == 1 else "changed", at, 200, _signature(i, n),
                         _title(i, n), json.dumps(_data(i, n)), crawl)
                    )  # fmt: skip
        conn.commit()
        conn.autocommit = True
        cur.execute("VACUUM ANALYZE")
        cur.execute("CHECKPOINT")  # the fill's dirty pages written now, not during a timed run
    return time.monotonic() - started


def _one(cur: psycopg.Cursor[Any], query: LiteralString) -> tuple[Any, ...]:
    found = cur.execute(query).fetchone()
    assert found is not None
    return tuple(found)


def _sizes(database_url: str) -> tuple[str, int, list[tuple[str, int]]]:
    """The server's version, the number of versions, and (part, bytes) of `page_versions`."""
    with psycopg.connect(database_url) as conn, conn.cursor() as cur:
        (server,) = _one(cur, "SHOW server_version")
        (count,) = _one(cur, "SELECT count(*) FROM page_versions")
        heap, table, total = _one(
            cur,
            "SELECT pg_relation_size('page_versions'), pg_table_size('page_versions'), "
            "pg_total_relation_size('page_versions')",
        )
        cur.execute(
            "SELECT indexrelid::regclass::text, pg_relation_size(indexrelid) FROM pg_index "
            "WHERE indrelid = 'page_versions'::regclass ORDER BY 1"
        )
        indexes = [(f"index {name}", int(size)) for name, size in cur.fetchall()]
    parts = [("heap (pg_relation_size)", heap), ("TOAST, free space and visibility maps", table - heap)]
    return server, count, [*parts, *indexes, ("total (pg_total_relation_size)", total)]


def _records(pages: int, count: int, history: bool) -> list[list[PageRecord]]:
    """`count` answers of `pages` pages in passes, batches of BATCH, each with a new signature."""
    t0 = datetime.now(UTC) - timedelta(days=1)
    records = []
    for k in range(count):
        i, n = k % pages, k // pages + 1
        records.append(
            PageRecord(
                url=f"https://shop.test/p/{i}.html",
                domain="shop.test",
                depth=2,
                attempts=1,
                status_code=200,
                content_type="text/html; charset=utf-8",
                title=_title(i, n),
                data=_data(i, n),
                signature=_signature(i, n),
                fetched_at=t0 + timedelta(seconds=k),
                history=history,
            )
        )
    return [records[i : i + BATCH] for i in range(0, len(records), BATCH)]


async def _store(database_url: str, batches: Sequence[Sequence[PageRecord]]) -> tuple[int, float]:
    """Store the batches one after another; (versions made, seconds)."""
    sink_db = Database(database_url)
    sink = Sink(sink_db)
    try:
        made = 0
        started = time.monotonic()
        for batch in batches:
            made += len(await sink.store_many(batch))
        return made, time.monotonic() - started
    finally:
        sink_db.close()


def _rates(database_url: str, pages: int, count: int) -> list[tuple[bool, int, float]]:
    """(history, versions made, seconds) of storing `count` records with history on, then off."""
    return [(on, *asyncio.run(_store(database_url, _records(pages, count, on)))) for on in (True, False)]


def main(argv: Sequence[str] | None = None) -> None:
    """Fill and measure, then store and time; print both."""
    parser = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--versions", type=int, default=1_000_000, help="versions to COPY (default 1,000,000)"
    )
    parser.add_argument("--pages", type=int, default=100_000, help="pages they belong to (default 100,000)")
    parser.add_argument("--records", type=int, default=50_000, help="records to store (default 50,000)")
    parser.add_argument("--store-pages", type=int, default=5_000, help="pages they belong to (default 5,000)")
    args = parser.parse_args(argv)
    if args.store_pages < BATCH:
        parser.error(f"--store-pages must be at least {BATCH}: a batch holds a page once")
    with services.database() as database:
        migrate(database)
        seconds = _fill(database, args.pages, args.versions)
        server, count, parts = _sizes(database)
        rates = {f"into those {count:,} versions": _rates(database, args.store_pages, args.records)}
    with services.database() as database:
        migrate(database)
        rates["into a fresh database"] = _rates(database, args.store_pages, args.records)
    print(f"PostgreSQL {server}: {count:,} versions over {args.pages:,} pages, by COPY in {seconds:.1f}s")
    per = 1_000_000 / count
    print(f"{'part of page_versions':<48} {'MB':>8} {'MB per 1M versions':>19} {'bytes/version':>14}")
    for name, size in parts:
        print(f"{name:<48} {size / MB:>8.1f} {size / MB * per:>19.1f} {size / count:>14.0f}")
    stored = f"{args.records:,} records over {args.store_pages:,} pages"
    print(f"store_many, batches of {BATCH}, one writer, {stored}:")
    for where, done in rates.items():
        for history, made, took in done:
            what = f"{made:,} versions, {made / took:,.0f} versions/s" if history else "history off"
            print(f"  {where:<34} {took:5.1f}s {args.records / took:>8,.0f} records/s ({what})")


if __name__ == "__main__":
    main()
