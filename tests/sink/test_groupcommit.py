from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence

import pytest
import sqlalchemy as sa

from crawler.errors import SinkError
from crawler.sink.database import Database
from crawler.sink.groupcommit import GroupCommit
from crawler.sink.sql import PageRecord, Sink, engine_url, migrate
from crawler.sink.versions import Version


class CountingSink(Sink):
    """The real sink, counting its transactions."""

    def __init__(self, database: Database) -> None:
        super().__init__(database)
        self.batches: list[int] = []

    async def store_many(self, records: Sequence[PageRecord]) -> dict[str, Version]:
        self.batches.append(len(records))
        return await super().store_many(records)


def count_rows(url: str) -> int:
    engine = sa.create_engine(engine_url(url))
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text("SELECT count(*) FROM pages")).scalar_one())
    finally:
        engine.dispose()


def record(i: int) -> PageRecord:
    return PageRecord(url=f"http://s.test/{i}", domain="s.test", depth=1, attempts=1)


async def test_concurrent_writes_share_transactions(database_url: str) -> None:
    await asyncio.to_thread(migrate, database_url)
    sink_db = Database(database_url)
    sink = CountingSink(sink_db)
    try:
        writes = GroupCommit(sink)
        await asyncio.gather(*(writes.store(record(i)) for i in range(300)))
        assert sum(sink.batches) == 300
        assert len(sink.batches) < 30  # grouped, not one commit per page
        assert count_rows(database_url) == 300
    finally:
        sink_db.close()


async def test_a_bad_row_fails_alone(pg_url: str) -> None:
    await asyncio.to_thread(migrate, pg_url)
    sink_db = Database(pg_url)
    sink = Sink(sink_db)
    try:
        writes = GroupCommit(sink)
        # PostgreSQL refuses a unique-index entry this large: only its writer hears about it.
        noise = "".join(f"{random.getrandbits(64):016x}" for _ in range(600))  # incompressible
        bad = PageRecord(url="http://s.test/" + noise, domain="s.test", depth=1, attempts=1)
        results = await asyncio.gather(
            *(writes.store(record(i)) for i in range(20)), writes.store(bad), return_exceptions=True
        )
        assert all(r is None for r in results[:20])
        assert isinstance(results[20], SinkError)
        assert count_rows(pg_url) == 20
    finally:
        sink_db.close()


@pytest.mark.parametrize("n", [1, 2])
async def test_small_batches_commit(sqlite_url: str, n: int) -> None:
    await asyncio.to_thread(migrate, sqlite_url)
    sink_db = Database(sqlite_url)
    sink = Sink(sink_db)
    try:
        writes = GroupCommit(sink)
        for i in range(n):
            await writes.store(record(i))
        assert count_rows(sqlite_url) == n
    finally:
        sink_db.close()
