"""Each domain's pause and back-off in the `domain_state` table: the copy a Redis loss cannot reach."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from crawler.errors import SinkError
from crawler.sink.database import Database
from crawler.sink.tables import DomainState

T = TypeVar("T")


Kept = tuple[float, float, float]
"""A domain's back-off as the rate limiter last set it: the share of its rate left (1: all of it),
when that was last lowered, and no request before `held_until` (a Retry-After; 0: none); times in
the Redis server's clock (Unix seconds)."""


class DomainStore:
    """Reads and writes the `domain_state` table; blocking (callers run it in a thread)."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def _session(self, work: Callable[[Session], T]) -> T:
        failed = f"domain state in {self._db.redacted}"
        with self._db.errors(failed), Session(self._db.engine) as session, session.begin():
            return work(session)

    def _upsert(self, domain: str, **values: object) -> None:
        """Set `values` on the domain's row, made if missing (two writers racing: the second updates)."""

        def work(session: Session) -> None:
            done = session.execute(update(DomainState).where(DomainState.domain == domain).values(**values))
            if done.rowcount == 0:  # type: ignore[attr-defined]
                session.add(DomainState(domain=domain, **values))

        try:
            self._session(work)
        except SinkError as exc:
            if not isinstance(exc.__cause__, IntegrityError):
                raise
            self._session(work)

    def pause(self, domain: str) -> None:
        """Note a domain paused by a person (kept until `resume`)."""
        self._upsert(domain, paused_at=datetime.now(UTC))

    def resume(self, domain: str) -> None:
        """Note a domain resumed."""
        self._upsert(domain, paused_at=None)

    def paused(self) -> set[str]:
        """The domains a person paused."""
        stmt = select(DomainState.domain).where(DomainState.paused_at.is_not(None))
        return self._session(lambda s: set(s.scalars(stmt).all()))

    def pushed_back(self, domain: str, kept: Kept) -> None:
        """Note a domain's back-off, as the rate limiter set it after the site pushed back."""
        factor, at, held_until = kept
        self._upsert(domain, backoff_factor=factor, backoff_at=at, held_until=held_until)

    def pushbacks(self) -> dict[str, Kept]:
        """Every domain's last back-off that may still be in force (factor below 1, or held)."""
        stmt = select(DomainState).where(
            or_(DomainState.backoff_factor < 1, DomainState.held_until > 0),
            DomainState.backoff_at.is_not(None),
        )

        def work(session: Session) -> dict[str, Kept]:
            return {
                row.domain: (row.backoff_factor or 1.0, row.backoff_at or 0.0, row.held_until or 0.0)
                for row in session.scalars(stmt)
            }

        return self._session(work)
