"""The recrawl schedule kept in the sink: each stored page's `next_fetch_at`, read through an index per
domain. Due pages are claimed with a lease (their `next_fetch_at` moved to the lease's end, in the same
statement), so no two schedulers publish one page; a page whose refresh was lost is due again when the
lease ends. An origin's round of sitemap reading is claimed the same way. On PostgreSQL the claim
skips rows another claim holds (FOR UPDATE SKIP LOCKED); SQLite runs one writer at a time, so its
claims cannot overlap.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar, overload
from urllib.parse import urlsplit

from sqlalchemy import ColumnElement, bindparam, func, or_, select, update
from sqlalchemy.engine import Connection

from crawler.archive import Archived
from crawler.sink.crawls import Crawl
from crawler.sink.database import Database
from crawler.sink.tables import Page, SitemapOrigin

T = TypeVar("T")
# Domains one statement names: SQLite refuses more than 32,766 bound values in one.
_IN_BATCH = 5_000


@dataclass(frozen=True, slots=True)
class Due:
    """A stored page claimed for a refresh: what its message carries."""

    url: str
    domain: str
    depth: int
    crawl: str | None
    etag: str | None
    last_modified: str | None
    signature: str | None
    interval: float | None
    gone: int
    version: int | None  # its newest version when claimed (None: none)
    archived: Archived | None = None  # where its stored answer is in the WARC archive


@dataclass(frozen=True, slots=True)
class Backlog:
    """A domain's pages due now, and since when the oldest of them is due (None: none due)."""

    due: int
    oldest: datetime | None


class Schedule:
    """Claims due pages and reports the backlog; blocking calls (run them in a thread)."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._skip_locked = database.backend == "postgresql"
        self._dialect: Any = database.dialect

    def claim(self, domain: str, limit: int, now: datetime, lease_until: datetime) -> list[Due]:
        """Up to `limit` of `domain`'s pages due at `now`, oldest first, leased until `lease_until`."""
        if limit <= 0:
            return []
        due = select(Page.id).where(*_due([domain], now)).order_by(Page.next_fetch_at).limit(limit)
        if self._skip_locked:
            due = due.with_for_update(skip_locked=True)
        stmt = (
            update(Page)
            .where(Page.id.in_(due.scalar_subquery()))
            .values(next_fetch_at=lease_until.astimezone(UTC))
            .returning(*_DUE)
        )
        rows = self._run("claiming due pages", lambda conn: conn.execute(stmt).all(), write=True)
        return [_claimed(row) for row in rows]

    def claim_spread(
        self, outside: Collection[str], per_domain: int, limit: int, now: datetime, lease_until: datetime
    ) -> list[Due]:
        """Up to `limit` pages due at `now` of any domain but those `outside`, at most `per_domain` of
        each, the longest due first, leased until `lease_until`: the host layout's, one claim for
        every domain it serves."""
        if limit <= 0 or per_domain <= 0:
            return []
        due = Page.next_fetch_at <= now.astimezone(UTC)
        ranked = (
            select(
                Page.id,
                Page.next_fetch_at,
                func.row_number()
                .over(partition_by=Page.domain, order_by=(Page.next_fetch_at, Page.id))
                .label("n"),
            )
            .where(Page.domain.not_in(list(outside)), due, *_live())
            .subquery()
        )
        chosen = (
            select(ranked.c.id).where(ranked.c.n <= per_domain).order_by(ranked.c.next_fetch_at).limit(limit)
        )
        # No FOR UPDATE beside a window; a row another claim leased meanwhile fails `due` when
        # PostgreSQL checks it again under its lock, so it is claimed once all the same.
        stmt = (
            update(Page)
            .where(Page.id.in_(chosen.scalar_subquery()), due)
            .values(next_fetch_at=lease_until.astimezone(UTC))
            .returning(*_DUE)
        )
        rows = self._run("claiming due pages", lambda conn: conn.execute(stmt).all(), write=True)
        return [_claimed(row) for row in rows]

    def unschedule(self, urls: Collection[str]) -> None:
        """Take the pages at `urls` off the schedule (their domain's recrawl is off now)."""
        stmt = update(Page).where(Page.url.in_(list(urls))).values(next_fetch_at=None)
        self._run("unscheduling pages", lambda conn: conn.execute(stmt), write=True)

    def claim_modified(
        self, modified: Mapping[str, datetime], now: datetime, lease_until: datetime
    ) -> list[Due]:
        """The stored pages among `modified` (canonical URL -> a sitemap's lastmod) last fetched
        before their lastmod: due at once, claimed as `claim` does, whatever their schedule."""
        if not modified:
            return []
        stmt = select(Page.id, Page.url, Page.fetched_at).where(Page.url.in_(list(modified)), *_live())
        if self._skip_locked:
            stmt = stmt.with_for_update(skip_locked=True)

        def claim(conn: Connection) -> list[Due]:
            stale = [id_ for id_, url, fetched in conn.execute(stmt) if _utc(fetched) < modified[url]]
            if not stale:
                return []
            rows = conn.execute(
                update(Page)
                .where(Page.id.in_(stale))
                .values(next_fetch_at=lease_until.astimezone(UTC))
                .returning(*_DUE)
            ).all()
            return [_claimed(row) for row in rows]

        return self._run("claiming pages a sitemap says changed", claim, write=True)

    def sitemap_rounds(self, domain: str, every: float | None, now: datetime) -> list[tuple[str, str | None]]:
        """The origins of `domain` whose sitemaps are due to be read again (all of them when `every`
        is None), with the crawl their URLs join, marked as read now. A domain none of whose origins
        was read yet takes the origin of one of its stored pages."""
        since = now.astimezone(UTC) - timedelta(seconds=every or 0)
        due = select(SitemapOrigin.origin).where(SitemapOrigin.domain == domain)
        if every is not None:
            due = due.where(SitemapOrigin.round_at <= since)
        if self._skip_locked:
            due = due.with_for_update(skip_locked=True)

        def claim(conn: Connection) -> list[tuple[str, str | None]]:
            known = conn.execute(
                select(func.count()).select_from(SitemapOrigin).where(SitemapOrigin.domain == domain)
            ).scalar_one()
            if not known:
                page = conn.execute(
                    select(Page.url, Page.crawl_id).where(Page.domain == domain).limit(1)
                ).first()
                if page is None:
                    return []
                first = self._dialect.insert(SitemapOrigin).values(
                    origin=_origin(page.url),
                    domain=domain,
                    crawl_id=page.crawl_id,
                    round_at=now.astimezone(UTC),
                    due_at=(now + timedelta(seconds=every or 0)).astimezone(UTC),
                )
                # Another scheduler may begin the same first round: one of the two does.
                began = conn.execute(first.on_conflict_do_nothing().returning(SitemapOrigin.origin)).first()
                return [(began[0], page.crawl_id)] if began is not None else []
            rows = conn.execute(
                update(SitemapOrigin)
                .where(SitemapOrigin.origin.in_(due.scalar_subquery()))
                .values(
                    round_at=now.astimezone(UTC), due_at=(now + timedelta(seconds=every or 0)).astimezone(UTC)
                )
                .returning(SitemapOrigin.origin, SitemapOrigin.crawl_id)
            ).all()
            return [(origin, crawl) for origin, crawl in rows]

        return self._run("claiming sitemap rounds", claim, write=True)

    def sitemap_rounds_outside(
        self,
        outside: Collection[str],
        every_of: Callable[[str], float | None],
        later: datetime,
        limit: int,
        now: datetime,
    ) -> list[tuple[str, str, str | None]]:
        """Up to `limit` origins of any domain but those `outside` (the host layout's) whose sitemaps
        are due to be read again, as (origin, domain, crawl), marked as read now: of those whose time
        to be looked at has come, the longest waiting, each if last read `every_of(domain)` seconds
        ago. Each looked at gets its next time: its domain's interval on, or `later` if it reads none
        on schedule (`every_of` None)."""
        oldest = (
            select(SitemapOrigin.origin, SitemapOrigin.domain, SitemapOrigin.round_at)
            .where(SitemapOrigin.domain.not_in(list(outside)))
            .where(SitemapOrigin.due_at <= now.astimezone(UTC))
            .order_by(SitemapOrigin.due_at)
            .limit(limit)
        )
        if self._skip_locked:
            oldest = oldest.with_for_update(skip_locked=True)
        moved = (
            update(SitemapOrigin)
            .where(SitemapOrigin.origin == bindparam("o"), SitemapOrigin.round_at == bindparam("r"))
            .values(due_at=bindparam("d"))
        )

        def claim(conn: Connection) -> list[tuple[str, str, str | None]]:
            due: dict[float, list[str]] = {}
            not_yet: list[dict[str, Any]] = []
            for origin, domain, round_at in conn.execute(oldest):
                every = every_of(domain)
                read = _utc(round_at)
                if every is None:
                    not_yet.append({"o": origin, "r": round_at, "d": later.astimezone(UTC)})
                elif read <= now - timedelta(seconds=every):
                    due.setdefault(every, []).append(origin)
                else:
                    not_yet.append({"o": origin, "r": round_at, "d": read + timedelta(seconds=every)})
            if not_yet:
                # Only if not read since: another scheduler may have claimed the origin meanwhile.
                conn.execute(moved, not_yet)
            claimed: list[tuple[str, str, str | None]] = []
            for every, origins in due.items():
                # Due again in the UPDATE: SQLite locks nothing on a read, and another scheduler may
                # have claimed the origin since.
                rows = conn.execute(
                    update(SitemapOrigin)
                    .where(
                        SitemapOrigin.origin.in_(origins),
                        SitemapOrigin.round_at <= (now - timedelta(seconds=every)).astimezone(UTC),
                    )
                    .values(
                        round_at=now.astimezone(UTC), due_at=(now + timedelta(seconds=every)).astimezone(UTC)
                    )
                    .returning(SitemapOrigin.origin, SitemapOrigin.domain, SitemapOrigin.crawl_id)
                ).all()
                claimed += [(origin, domain, crawl) for origin, domain, crawl in rows]
            return claimed

        return self._run("claiming the host layout's sitemap rounds", claim, write=True)

    def backlog(self, domains: Collection[str], now: datetime) -> dict[str, Backlog]:
        """Per domain with pages due at `now`: how many, and the oldest one's due time."""
        stmt = select(Page.domain, func.count(), func.min(Page.next_fetch_at)).where(*_due(domains, now))
        rows = self._run("reading the backlog", lambda conn: conn.execute(stmt.group_by(Page.domain)).all())
        return {domain: Backlog(n, _utc(oldest)) for domain, n, oldest in rows}

    def backlog_outside(self, outside: Collection[str], now: datetime) -> Backlog:
        """The pages due at `now` of any domain but those `outside` (the host layout's), in one."""
        due = (Page.domain.not_in(list(outside)), Page.next_fetch_at <= now.astimezone(UTC), *_live())
        stmt = select(func.count(), func.min(Page.next_fetch_at)).where(*due)
        n, oldest = self._run("reading the backlog", lambda conn: conn.execute(stmt).one())
        return Backlog(int(n), _utc(oldest))

    def found(self, domains: Collection[str]) -> dict[str, dict[str, int]]:
        """Per domain, its pages by what their last fetch found (new, changed, not_modified, ...)."""
        stmt = (
            select(Page.domain, Page.found, func.count())
            .where(Page.domain.in_(list(domains)), Page.found.is_not(None))
            .group_by(Page.domain, Page.found)
        )
        rows = self._run("counting refreshes", lambda conn: conn.execute(stmt).all())
        out: dict[str, dict[str, int]] = {}
        for domain, found, n in rows:
            out.setdefault(domain, {})[found or ""] = n
        return out

    def make_due(self, domains: Sequence[str], now: datetime) -> int:
        """Make every stored page of `domains` due at `now` (those being refreshed too); how many."""

        def scheduled(conn: Connection) -> int:
            made = 0
            for start in range(0, len(domains), _IN_BATCH):
                chunk = list(domains[start : start + _IN_BATCH])
                stmt = update(Page).where(Page.domain.in_(chunk)).values(next_fetch_at=now.astimezone(UTC))
                made += conn.execute(stmt).rowcount
            return made

        return int(self._run("scheduling pages", scheduled, write=True))

    def _run(self, what: str, work: Callable[[Connection], T], *, write: bool = False) -> T:
        engine = self._db.engine
        # Connecting inside the errors: connect() takes a pooled connection at once.
        with (
            self._db.errors(f"{what} in {self._db.redacted} failed"),
            engine.begin() if write else engine.connect() as conn,
        ):
            return work(conn)


# What a claim returns of each page: the fields of Due, in order.
_DUE = (
    Page.url,
    Page.domain,
    Page.depth,
    Page.crawl_id,
    Page.etag,
    Page.last_modified,
    Page.signature,
    Page.fetch_interval,
    Page.gone,
    Page.version,
    Page.warc_file,
    Page.warc_offset,
    Page.warc_length,
    Page.warc_digest,
    Page.warc_date,
)


def _claimed(row: Any) -> Due:
    (url, domain, depth, crawl, etag, modified, signature, interval, gone, version, *warc) = tuple(row)
    file, offset, length, digest, date = warc
    archived = Archived(file, offset, length, digest, date) if file and digest and date else None
    return Due(url, domain, depth, crawl, etag, modified, signature, interval, gone, version, archived)


def _live() -> tuple[ColumnElement[bool], ...]:
    """Pages whose crawl is neither cancelled nor deleted."""
    live = select(Crawl.id).where(Crawl.state != "cancelled")
    return (or_(Page.crawl_id.is_(None), Page.crawl_id.in_(live.scalar_subquery())),)


def _due(domains: Collection[str], now: datetime) -> tuple[ColumnElement[bool], ...]:
    """Pages of `domains` due at `now`, whose crawl is neither cancelled nor deleted."""
    return (Page.domain.in_(list(domains)), Page.next_fetch_at <= now.astimezone(UTC), *_live())


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


@overload
def _utc(when: datetime) -> datetime: ...
@overload
def _utc(when: None) -> None: ...
def _utc(when: datetime | None) -> datetime | None:
    # SQLite hands back naive times, which are UTC.
    if when is None or when.tzinfo is not None:
        return when
    return when.replace(tzinfo=UTC)
