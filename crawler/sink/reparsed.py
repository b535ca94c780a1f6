"""What `crawler reparse` reads and writes in the sink: the archived pages to read again, in id order,
and each batch's rows, versions and the run's cursor, committed in one transaction."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, bindparam, func, insert, select, update
from sqlalchemy.engine import Connection

from crawler.archive import Archived
from crawler.sink import versions
from crawler.sink.crawls import OPEN, Crawl
from crawler.sink.database import Database
from crawler.sink.sql import clean_json, clean_text
from crawler.sink.tables import CONTENT, Page, Reparse

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Selection:
    """Which archived pages a run reads: of these domains (none: all), fetched at or after `since`,
    stored by crawl `crawl`."""

    domains: tuple[str, ...] = ()
    since: datetime | None = None
    crawl: str | None = None

    @property
    def key(self) -> str:
        """The run's filters as `reparses.filters` holds them: the same command finds its run."""
        since = self.since.astimezone(UTC).isoformat() if self.since else None
        return json.dumps(
            {"domains": sorted(self.domains), "since": since, "crawl": self.crawl}, sort_keys=True
        )

    def where(self) -> tuple[ColumnElement[bool], ...]:
        """The pages table's conditions for it."""
        out: list[ColumnElement[bool]] = [Page.warc_file.is_not(None)]
        if self.domains:
            out.append(Page.domain.in_(self.domains))
        if self.since is not None:
            out.append(Page.fetched_at >= self.since.astimezone(UTC))
        if self.crawl is not None:
            out.append(Page.crawl_id == self.crawl)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class PageContent:
    """A page's content columns (docs/content.md), as stored or as a reading made them; `simhash` in
    the column's hex."""

    markdown: str | None = None
    text: str | None = None
    lang: str | None = None
    simhash: str | None = None
    content_refused: str | None = None
    near_duplicate_of: str | None = None


@dataclass(frozen=True, slots=True)
class Target:
    """A stored page to read again: what its row says, and where its answer is."""

    id: int
    url: str
    domain: str
    depth: int
    crawl: str | None
    final_url: str | None
    title: str | None
    data: dict[str, Any] | None
    error: str | None
    signature: str | None
    archived: Archived
    content: PageContent = PageContent()
    expectations: list[dict[str, str]] | None = None  # those it failed, as stored (docs/quality.md)


@dataclass(frozen=True, slots=True)
class Reread:
    """A page's row as its new reading has it; `history`: its domain keeps versions; `content`: its
    content columns (None: left as they are)."""

    target: Target
    title: str | None
    data: dict[str, Any] | None
    error: str | None
    signature: str | None
    history: bool
    content: PageContent | None = None
    expectations: list[dict[str, str]] | None = None  # those its new reading failed


@dataclass(slots=True)
class Run:
    """A run of `crawler reparse`: its cursor (the last page done) and counts so far."""

    id: int
    last_page_id: int
    pages: int = 0
    changed: int = 0
    failed: int = 0
    links: int = 0
    resumed: bool = False


_TARGET = (
    *(Page.id, Page.url, Page.domain, Page.depth, Page.crawl_id, Page.final_url),
    *(Page.title, Page.data, Page.error, Page.signature),
    *(Page.warc_file, Page.warc_offset, Page.warc_length, Page.warc_digest, Page.warc_date),
    *(Page.markdown, Page.text, Page.lang, Page.simhash, Page.content_refused, Page.near_duplicate_of),
    Page.expectations,
)
CONTENT_FIELDS = CONTENT


class ReparseStore:
    """The sink as `crawler reparse` uses it; blocking: call from a thread."""

    def __init__(self, database: Database) -> None:
        self._db = database

    def begin(self, selection: Selection, now: datetime) -> Run:
        """The unfinished run of the same filters, to resume; else a new one."""

        def begin(conn: Connection) -> Run:
            r = Reparse
            found = conn.execute(
                select(r.id, r.last_page_id, r.pages, r.changed, r.failed, r.links)
                .where(r.filters == selection.key, r.finished_at.is_(None))
                .order_by(r.id.desc())
                .limit(1)
            ).first()
            if found is not None:
                return Run(*found, resumed=True)
            made = conn.execute(
                insert(r).values(filters=selection.key, started_at=now.astimezone(UTC)).returning(r.id)
            ).scalar_one()
            return Run(made, 0)

        return self._run("beginning a reparse", begin)

    def remaining(self, selection: Selection, after: int) -> int:
        """How many pages of `selection` come after page id `after`."""
        stmt = select(func.count()).select_from(Page).where(*selection.where(), Page.id > after)
        return int(self._run("counting archived pages", lambda conn: conn.execute(stmt).scalar_one()))

    def targets(self, selection: Selection, after: int, limit: int) -> list[Target]:
        """Up to `limit` pages of `selection` after page id `after`, in id order."""
        stmt = select(*_TARGET).where(*selection.where(), Page.id > after).order_by(Page.id).limit(limit)

        def read(conn: Connection) -> list[Target]:
            out = []
            for row in conn.execute(stmt):
                (id_, url, domain, depth, crawl, final_url, title, data, error, signature, *rest) = tuple(row)
                file, offset, length, digest, date = rest[:5]
                archived = Archived(file, offset, length, digest or "", date or "")
                content = PageContent(*rest[5:11])
                out.append(
                    Target(
                        id_,
                        url,
                        domain,
                        depth,
                        crawl,
                        final_url,
                        title,
                        data,
                        error,
                        signature,
                        archived,
                        content,
                        rest[11],
                    )
                )
            return out

        return self._run("reading archived pages", read)

    def commit(
        self,
        run: Run,
        rereads: Sequence[Reread],
        *,
        cursor: int,
        pages: int,
        failed: int,
        links: int,
        quality: Mapping[str, Mapping[tuple[str, str], int]] | None = None,
    ) -> list[versions.Version]:
        """Store the pages whose reading changed, their versions, and the run's cursor, together
        with `quality`, the changes to each ended crawl's quality counts (crawl -> (domain, kind) -> n);
        the versions written (for the change feed)."""

        def commit(conn: Connection) -> list[versions.Version]:
            written = self._store(conn, rereads) if rereads else []
            for crawl, changes in (quality or {}).items():
                _recount(conn, crawl, changes)
            conn.execute(
                update(Reparse)
                .where(Reparse.id == run.id)
                .values(
                    last_page_id=cursor,
                    pages=Reparse.pages + pages,
                    changed=Reparse.changed + len(rereads),
                    failed=Reparse.failed + failed,
                    links=Reparse.links + links,
                )
            )
            return written

        written = self._run("storing re-read pages", commit)
        run.last_page_id = cursor
        run.pages += pages
        run.changed += len(rereads)
        run.failed += failed
        run.links += links
        return written

    def _store(self, conn: Connection, rereads: Sequence[Reread]) -> list[versions.Version]:
        rows = {
            r.target.url: {
                "b_id": r.target.id,
                "title": clean_text(r.title),
                "data": r.data and clean_json(r.data),
                "error": clean_text(r.error),
                "signature": r.signature if r.signature is not None else r.target.signature,
                "expectations": r.expectations or None,
            }
            for r in rereads
        }
        kept = [r for r in rereads if r.history]
        known = versions.latest(conn, [r.target.url for r in kept])
        planned = {}
        for r in kept:
            before = known.get(r.target.url)
            row = rows[r.target.url]
            if (
                before is None
                or r.error is not None
                or (before.title, before.data) == (row["title"], row["data"])
            ):
                continue
            version = {**row, "url": r.target.url, "domain": r.target.domain, "crawl_id": r.target.crawl}
            version |= {"fetched_at": datetime.now(UTC), "status_code": before.status_code}
            if r.content is not None:  # the content it stores, as a crawl's version holds it
                version |= {name: clean_text(getattr(r.content, name)) for name in CONTENT_FIELDS}
            planned[r.target.url] = versions.Planned(version, (before.version or 0) + 1, "reparse", before)
        stmt = (
            update(Page)
            .where(Page.id == bindparam("b_id"))
            .values(title=bindparam("title"), data=bindparam("data"), error=bindparam("error"))
            .values(signature=bindparam("signature"), expectations=bindparam("expectations"))
        )
        conn.execute(stmt, list(rows.values()))
        contents = [
            {"b_id": r.target.id, **{name: clean_text(getattr(r.content, name)) for name in CONTENT_FIELDS}}
            for r in rereads
            if r.content is not None
        ]
        if contents:
            values: dict[str, Any] = {name: bindparam(name) for name in CONTENT_FIELDS}
            conn.execute(update(Page).where(Page.id == bindparam("b_id")).values(**values), contents)
        if planned:
            numbers = [{"b_id": rows[url]["b_id"], "version": p.number} for url, p in planned.items()]
            conn.execute(
                update(Page).where(Page.id == bindparam("b_id")).values(version=bindparam("version")), numbers
            )
            return list(versions.write(conn, planned).values())
        return []

    def finish(self, run: Run, now: datetime) -> None:
        """Mark the run done: the same command later starts a new one."""
        stmt = update(Reparse).where(Reparse.id == run.id).values(finished_at=now.astimezone(UTC))
        self._run("finishing a reparse", lambda conn: conn.execute(stmt))

    def _run(self, what: str, work: Callable[[Connection], T]) -> T:
        with self._db.errors(f"{what} in {self._db.redacted} failed"), self._db.engine.begin() as conn:
            return work(conn)


def _recount(conn: Connection, crawl: str, changes: Mapping[tuple[str, str], int]) -> None:
    """Add `changes` to an ended crawl's kept counts; a running crawl's are its workers' (in Redis)."""
    row = conn.execute(select(Crawl.state, Crawl.counts).where(Crawl.id == crawl)).first()
    if row is None or row.state in OPEN or row.counts is None:
        return
    counts = {domain: dict(kinds) for domain, kinds in row.counts.items()}
    for (domain, kind), n in changes.items():
        kinds = counts.setdefault(domain, {})
        kinds[kind] = max(0, kinds.get(kind, 0) + n)
    conn.execute(update(Crawl).where(Crawl.id == crawl).values(counts=counts))
