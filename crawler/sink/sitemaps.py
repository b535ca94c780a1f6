"""What the crawl knows of sitemaps: each file's last reading (validators, signature, what its URLs
became) and the origins whose sitemaps are read, with the crawl their URLs join."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from crawler.sink.database import Database
from crawler.sink.sql import clean_text
from crawler.sink.tables import ETAG_LENGTH, LAST_MODIFIED_LENGTH, SitemapFile, SitemapOrigin

T = TypeVar("T")

# What a listed URL became, when it was not dropped: routed, known already, refreshed for its
# lastmod, or (an index's entry) a sitemap to read. Any other key of a reading's counts says why
# URLs were dropped.
URL_OUTCOMES = frozenset({"discovered", "known", "modified", "sitemaps"})


@dataclass(frozen=True, slots=True)
class Validators:
    """What a sitemap's last reading kept to ask it again conditionally, or to tell it unchanged."""

    etag: str | None = None
    last_modified: str | None = None
    signature: str | None = None


@dataclass(frozen=True, slots=True)
class SitemapRead:
    """One reading of a sitemap file: how it went, and what its entries became, by outcome."""

    url: str
    domain: str
    depth: int
    outcome: str  # read, not_modified, unchanged, redirected, missing, failed, disallowed
    read_at: datetime
    status_code: int | None = None
    kind: str | None = None
    validators: Validators = Validators()
    counts: Mapping[str, int] = field(default_factory=dict)
    note: str | None = None


class SitemapStore:
    """Reads and writes the `sitemaps` and `sitemap_origins` tables; blocking (run it in a thread)."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._dialect: Any = database.dialect

    def validators(self, url: str) -> Validators | None:
        """The validators the last reading of `url` kept; None if it was never read."""
        stmt = select(SitemapFile.etag, SitemapFile.last_modified, SitemapFile.signature).where(
            SitemapFile.url == url
        )
        row = self._run("reading a sitemap's validators", lambda conn: conn.execute(stmt).first())
        return Validators(*tuple(row)) if row is not None else None

    def record(self, read: SitemapRead) -> None:
        """Keep a reading; a reading that fetched nothing new (a 304, the same signature) keeps the
        counts of the one before, which still say what its URLs became."""
        values = {
            "url": read.url,
            "domain": read.domain,
            "depth": read.depth,
            "read_at": read.read_at.astimezone(UTC),
            "outcome": read.outcome,
            "status_code": read.status_code,
            "kind": read.kind,
            "etag": clean_text(read.validators.etag, ETAG_LENGTH),
            "last_modified": clean_text(read.validators.last_modified, LAST_MODIFIED_LENGTH),
            "signature": read.validators.signature,
            "counts": dict(read.counts),
            "note": clean_text(read.note, 2_000),
        }
        kept = {"url"}
        if read.outcome in ("not_modified", "unchanged"):
            kept |= {"kind", "counts", "signature"}
            if read.outcome == "unchanged":
                kept -= {"signature"}
        stmt = self._dialect.insert(SitemapFile).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[SitemapFile.url],
            set_={k: stmt.excluded[k] for k in values if k not in kept},
        )
        self._run("keeping a sitemap's reading", lambda conn: conn.execute(stmt), write=True)

    def note_origin(
        self, origin: str, domain: str, crawl: str | None, now: datetime, every: float | None = None
    ) -> None:
        """Remember an origin whose sitemaps were looked for now, and the crawl their URLs join; its
        domain reads them again `every` seconds (None: none on schedule, or not known here)."""
        values = {
            "origin": origin,
            "domain": domain,
            "crawl_id": crawl,
            "round_at": now.astimezone(UTC),
            "due_at": (now + timedelta(seconds=every or 0)).astimezone(UTC),
        }
        stmt = self._dialect.insert(SitemapOrigin).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=[SitemapOrigin.origin],
            set_={k: stmt.excluded[k] for k in ("domain", "crawl_id", "round_at", "due_at")},
        )
        self._run("noting a sitemap origin", lambda conn: conn.execute(stmt), write=True)

    def files(self, domain: str) -> list[SitemapRead]:
        """The sitemap files of `domain` as last read, by URL."""
        table = SitemapFile.__table__
        stmt = select(table).where(table.c.domain == domain).order_by(table.c.url)

        def read(conn: Connection) -> list[SitemapRead]:
            return [
                SitemapRead(
                    f["url"],
                    f["domain"],
                    f["depth"],
                    f["outcome"],
                    _utc(f["read_at"]),
                    f["status_code"],
                    f["kind"],
                    Validators(f["etag"], f["last_modified"], f["signature"]),
                    dict(f["counts"] or {}),
                    f["note"],
                )
                for f in conn.execute(stmt).mappings()
            ]

        return self._run("reading sitemaps", read)

    def totals(self, domains: Collection[str]) -> dict[str, dict[str, int]]:
        """Per domain of `domains`: its sitemap files (`files`) and their entries' counts summed."""
        stmt = select(SitemapFile.domain, SitemapFile.counts).where(SitemapFile.domain.in_(list(domains)))
        rows = self._run("counting sitemaps", lambda conn: conn.execute(stmt).all())
        out: dict[str, dict[str, int]] = {}
        for domain, counts in rows:
            total = out.setdefault(domain, {"files": 0})
            total["files"] += 1
            for key, n in (counts or {}).items():
                total[key] = total.get(key, 0) + int(n)
        return out

    def origins(self, domain: str) -> int:
        """How many origins of `domain` have their sitemaps read."""
        stmt = select(func.count()).select_from(SitemapOrigin).where(SitemapOrigin.domain == domain)
        return int(self._run("counting sitemap origins", lambda conn: conn.execute(stmt).scalar_one()))

    def _run(self, what: str, work: Callable[[Connection], T], *, write: bool = False) -> T:
        engine = self._db.engine
        # Connecting inside the errors: connect() takes a pooled connection at once.
        with (
            self._db.errors(f"{what} in {self._db.redacted} failed"),
            engine.begin() if write else engine.connect() as conn,
        ):
            return work(conn)


def _utc(when: datetime) -> datetime:
    # SQLite hands back naive times, which are UTC.
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
