"""`crawler history prune`: a domain's `history` setting applied to its pages' versions.

Per page the newest `keep` versions stay, and of the others none older than `max_age`; a page's newest
version always stays. Doomed versions are found a batch of pages at a time (keyset on the page id)
and deleted by id, DELETE_BATCH a transaction, so no statement holds a lock for long, on SQLite or
PostgreSQL, while workers go on writing versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Select, and_, delete, func, or_, select
from sqlalchemy.engine import Connection

from crawler.config import History
from crawler.sink.database import Database
from crawler.sink.tables import Page, PageVersion

PAGE_BATCH = 1_000  # pages whose versions one read ranks
DELETE_BATCH = 5_000  # version ids one transaction deletes


def _doomed(domain: str, after: int, upto: int, history: History, cutoff: datetime) -> Select[Any]:
    """The ids of the versions to delete of the domain's pages with ids in (after, upto]."""
    v = PageVersion
    # 1 is a page's newest version, whatever the numbers the versions before it were pruned to.
    newest_first = func.row_number().over(partition_by=v.page_id, order_by=v.version.desc())
    ranked = (
        select(v.id, v.fetched_at, newest_first.label("rank"))
        .join(Page, Page.id == v.page_id)
        .where(Page.domain == domain, Page.id > after, Page.id <= upto)
        .subquery()
    )
    old = and_(ranked.c.rank > 1, ranked.c.fetched_at < cutoff)
    return select(ranked.c.id).where(or_(ranked.c.rank > history.keep, old)).order_by(ranked.c.id)


class Pruner:
    """Deletes the versions a domain's `history` setting no longer keeps."""

    def __init__(self, database: Database, pages: int = PAGE_BATCH, batch: int = DELETE_BATCH) -> None:
        self._db = database
        self._engine = database.engine
        self._pages, self._batch = pages, batch

    def prune(self, domain: str, history: History, dry_run: bool = False, now: datetime | None = None) -> int:
        """Delete the domain's versions `history` does not keep (none with `dry_run`); how many."""
        cutoff = (now or datetime.now(UTC)).astimezone(UTC) - timedelta(seconds=history.max_age)
        after, count = 0, 0
        with self._db.errors(f"pruning versions of {domain} in {self._db.redacted} failed"):
            while True:
                with self._engine.connect() as conn:
                    upto = self._last_page(conn, domain, after)
                    if upto is None:
                        return count
                    doomed: Sequence[int] = (
                        conn.execute(_doomed(domain, after, upto, history, cutoff)).scalars().all()
                    )
                after = upto
                # What the deletes say, not what was read: another prune, or a purge, may be first.
                count += len(doomed) if dry_run else self._delete(doomed)

    def _last_page(self, conn: Connection, domain: str, after: int) -> int | None:
        """The id of the last page of the next batch after `after`, or None at the end."""
        ids = select(Page.id).where(Page.domain == domain, Page.id > after).order_by(Page.id)
        batch = ids.limit(self._pages).subquery()
        last: int | None = conn.execute(select(func.max(batch.c.id))).scalar()
        return last

    def _delete(self, ids: Sequence[int]) -> int:
        deleted = 0
        for start in range(0, len(ids), self._batch):
            chunk = ids[start : start + self._batch]
            with self._engine.begin() as conn:
                deleted += conn.execute(delete(PageVersion).where(PageVersion.id.in_(chunk))).rowcount
        return deleted
