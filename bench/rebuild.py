"""Rebuild rate: how fast a dedup store Redis lost is rebuilt from the sink's rows, in rows/s.

python -m bench.rebuild [--rows N] [--db sqlite,postgresql] [--mode plain,compact,bloom] [--batch B]

For each database and mode: stores N pages of one crawl in a fresh database (SQLite in a temporary
file, or a new PostgreSQL database on BENCH_PG_SERVER), then, under a fresh Redis key prefix, has
crawler.frontier.recovery.Recovery rebuild that crawl's store as after a loss: the rows' URLs read
in id order B at a time, fingerprinted and written to Redis, then the quota counters from the
sink's counts. It reports the rows/s of the whole rebuild and of the sink reads alone, and how
long 10 million rows would take at that rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg import sql
from redis.asyncio import Redis
from sqlalchemy import insert

from bench import services
from crawler.config import DedupConfig
from crawler.dedup.store import SeenStore
from crawler.frontier.recovery import REBUILD_BATCH, Recovery
from crawler.names import Names
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.sql import create_sink_engine, engine_url, migrate
from crawler.sink.stored import StoredPages
from crawler.sink.tables import Page

PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgresql://postgres@localhost:5432")
DATABASES = ("sqlite", "postgresql")
MODES = ("plain", "compact", "bloom")
CRAWL = "bench"
TARGET = 10_000_000
SEED_CHUNK = 20_000
HEADER = f"{'database':<11} {'mode':<8} {'rows':>9} {'read rows/s':>12} {'rebuild rows/s':>15} {'10M':>9}"


@contextmanager
def database(kind: str) -> Iterator[str]:
    """A fresh, migrated database URL of `kind`, removed after."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            url = f"sqlite:///{Path(directory) / 'rebuild.db'}"
            migrate(url)
            yield url
        return
    name = f"crawler_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        url = f"{PG_SERVER}/{name}"
        migrate(url)
        yield url
    finally:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def seed(url: str, rows: int) -> float:
    """Store `rows` pages of crawl CRAWL (and its record); seconds taken."""
    started = time.perf_counter()
    engine = create_sink_engine(engine_url(url))
    now = datetime.now(UTC)
    try:
        for start in range(0, rows, SEED_CHUNK):
            chunk = [
                {
                    "url": f"http://shop{i % 97}.test/product/{i}?page={i % 13}",
                    "domain": f"shop{i % 97}.test",
                    "status_code": 200,
                    "depth": 2,
                    "fetched_at": now,
                    "attempts": 1,
                    "credits": 0.0,
                    "crawl_id": CRAWL,
                }
                for i in range(start, min(rows, start + SEED_CHUNK))
            ]
            with engine.begin() as conn:
                conn.execute(insert(Page), chunk)
    finally:
        engine.dispose()
    store_db = Database(url)
    store = CrawlStore(store_db)
    try:
        options = {"domains": None, "max_depth": None, "max_pages": None, "priority": None}
        store.add(CrawlRecord(CRAWL, "bench", "running", [], options, now, None, None))
    finally:
        store_db.close()
    return time.perf_counter() - started


def read_only(url: str, batch: int) -> tuple[int, float]:
    """The sink's part alone: every URL of the crawl read B at a time; (rows, seconds)."""
    pages_db = Database(url)
    pages = StoredPages(pages_db)
    started = time.perf_counter()
    after, rows = 0, 0
    try:
        while found := pages.urls(CRAWL, after, batch):
            after, rows = found[-1][0], rows + len(found)
    finally:
        pages_db.close()
    return rows, time.perf_counter() - started


async def rebuild(url: str, mode: str, batch: int, rows: int) -> tuple[int, float]:
    """A whole rebuild into a fresh key prefix; (rows, seconds)."""
    client = Redis.from_url(services.REDIS_URL)
    try:
        with services.key_prefix("rebuildbench") as prefix:
            names = Names(prefix)
            recovery_db = Database(url)
            recovery = Recovery(client, names, recovery_db, batch=batch)
            try:
                config = DedupConfig.model_validate({"mode": mode, "capacity": max(rows, 1000)})
                store = SeenStore(client, names, config, recovery).for_crawl(CRAWL)
                await recovery(store, "known")  # as a claim finding its store gone does
                ((_, rebuilt, seconds),) = recovery.rebuilds
                return rebuilt, seconds
            finally:
                recovery_db.close()
    finally:
        await client.aclose()


def _choices(allowed: Sequence[str]) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        chosen = [c.strip() for c in text.split(",") if c.strip()]
        if not chosen or any(c not in allowed for c in chosen):
            raise argparse.ArgumentTypeError(f"choose from {', '.join(allowed)}, comma-separated")
        return chosen

    return parse


def main(argv: Sequence[str] | None = None) -> None:
    """Run the bench and print one line per database and mode."""
    parser = argparse.ArgumentParser(prog="python -m bench.rebuild", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="pages stored (default 200,000)")
    parser.add_argument("--db", type=_choices(DATABASES), default=list(DATABASES))
    parser.add_argument("--mode", type=_choices(MODES), default=["plain"])
    parser.add_argument("--batch", type=int, default=REBUILD_BATCH, help="rows per step")
    args = parser.parse_args(argv)
    print(HEADER)
    for kind in args.db:
        with database(kind) as url:
            seed(url, args.rows)
            read, read_seconds = read_only(url, args.batch)
            for mode in args.mode:
                rebuilt, seconds = asyncio.run(rebuild(url, mode, args.batch, args.rows))
                assert rebuilt == read == args.rows, (rebuilt, read, args.rows)
                rate = rebuilt / seconds
                print(
                    f"{kind:<11} {mode:<8} {rebuilt:>9,} {read / read_seconds:>12,.0f} {rate:>15,.0f} "
                    f"{TARGET / rate / 60:>7.1f} m"
                )


if __name__ == "__main__":
    main()
