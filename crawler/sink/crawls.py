"""Crawl records: one row per crawl in the `crawls` table, so no crawl is lost when a process restarts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar

from sqlalchemy import JSON, DateTime, String, Text, and_, delete, func, or_, select, update
from sqlalchemy.orm import Mapped, Session, mapped_column

from crawler.sink.database import Database
from crawler.sink.tables import Base, Page

# `interrupted`: its work was stopped before it ended (Ctrl-C, a fetch service that refused, a reset);
# what it left queued may still be crawled, and then it finishes.
CrawlStatus = Literal["running", "finished", "cancelled", "interrupted"]
STATES: tuple[CrawlStatus, ...] = ("running", "finished", "cancelled", "interrupted")
OPEN: tuple[CrawlStatus, ...] = ("running", "interrupted")  # states a crawl may still end from
T = TypeVar("T")


class Crawl(Base):
    """One crawl (the `crawls` table)."""

    __tablename__ = "crawls"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    label: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(String(16), index=True)
    seeds: Mapped[list[str]] = mapped_column(JSON)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Final counts per domain, written when the crawl ends (Redis holds the live ones until then).
    counts: Mapped[dict[str, dict[str, int]] | None] = mapped_column(JSON)


@dataclass(frozen=True, slots=True)
class CrawlRecord:
    """A crawl as stored."""

    id: str
    label: str | None
    state: CrawlStatus
    seeds: list[str]
    options: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None
    counts: dict[str, dict[str, int]] | None

    @classmethod
    def of(cls, row: Crawl) -> CrawlRecord:
        """The record of a row; SQLite returns naive times, which are UTC."""
        state: CrawlStatus = next((st for st in STATES if st == row.state), "running")
        return cls(
            row.id,
            row.label,
            state,
            list(row.seeds),
            dict(row.options),
            _utc(row.created_at),
            _utc(row.finished_at) if row.finished_at else None,
            row.counts,
        )


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class CrawlStore:
    """Reads and writes crawl records; blocking (callers run it in a thread)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def _session(self, work: Callable[[Session], T]) -> T:
        failed = f"crawl records in {self._db.redacted}"
        with self._db.errors(failed), Session(self._db.engine) as session, session.begin():
            return work(session)

    def add(self, record: CrawlRecord) -> None:
        """Store a new crawl."""

        def work(session: Session) -> None:
            session.add(
                Crawl(
                    id=record.id,
                    label=record.label,
                    state=record.state,
                    seeds=record.seeds,
                    options=record.options,
                    created_at=record.created_at,
                    finished_at=record.finished_at,
                    counts=record.counts,
                )
            )

        self._session(work)

    def get(self, crawl: str) -> CrawlRecord | None:
        """One crawl, or None."""
        return self._session(lambda s: ((row := s.get(Crawl, crawl)) and CrawlRecord.of(row)) or None)

    def credits(self, crawls: list[str]) -> dict[str, float]:
        """The fetch-service credits each crawl's stored pages were charged, for those that paid."""
        stmt = (
            select(Page.crawl_id, func.sum(Page.credits))
            .where(Page.crawl_id.in_(crawls), Page.credits > 0)
            .group_by(Page.crawl_id)
        )
        if not crawls:
            return {}
        return self._session(lambda s: {str(c): float(n) for c, n in s.execute(stmt).all()})

    def list(
        self, state: CrawlStatus | None = None, limit: int | None = 1000, before: str | None = None
    ) -> list[CrawlRecord]:
        """Crawls, newest first (`limit` of them, None: all), optionally only those in `state`, and only
        those listed after the crawl `before` (a page's last); an unknown `before` lists nothing."""
        stmt = select(Crawl).order_by(Crawl.created_at.desc(), Crawl.id.desc()).limit(limit)
        if state is not None:
            stmt = stmt.where(Crawl.state == state)

        def work(session: Session) -> list[CrawlRecord]:
            query = stmt
            if before is not None:
                mark = session.get(Crawl, before)
                if mark is None:
                    return []
                query = query.where(
                    or_(
                        Crawl.created_at < mark.created_at,
                        and_(Crawl.created_at == mark.created_at, Crawl.id < mark.id),
                    )
                )
            return [CrawlRecord.of(row) for row in session.scalars(query)]

        return self._session(work)

    def end(self, crawl: str, state: CrawlStatus, counts: dict[str, dict[str, int]]) -> bool:
        """Mark a crawl ended (at this moment) with its counts then; False if it had ended already.

        One atomic update: whoever sees the end first decides it. Only a running crawl is interrupted;
        an interrupted one may still finish (its leftovers crawled) or be cancelled.
        """
        open_states = ("running",) if state == "interrupted" else OPEN
        stmt = (
            update(Crawl)
            .where(Crawl.id == crawl, Crawl.state.in_(open_states))
            .values(state=state, finished_at=datetime.now(UTC), counts=counts)
        )
        return self._session(lambda s: bool(s.execute(stmt).rowcount > 0))  # type: ignore[attr-defined]

    def delete(self, crawl: str, purge: bool = False) -> bool:
        """Forget a crawl (and with `purge`, the pages it stored); False if there was none."""

        def work(session: Session) -> bool:
            if purge:
                session.execute(delete(Page).where(Page.crawl_id == crawl))
            return bool(session.execute(delete(Crawl).where(Crawl.id == crawl)).rowcount > 0)  # type: ignore[attr-defined]

        return self._session(work)

    def ping(self) -> None:
        """Raise SinkError unless the database answers."""
        self._session(lambda s: s.execute(select(1)).scalar())
