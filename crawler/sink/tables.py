"""The tables: `pages` (the latest state of each crawled URL), `page_versions` (its history), and
the sitemaps read (`sitemaps`), the origins whose sitemaps are read in rounds (`sitemap_origins`),
the runs of `crawler reparse` (`reparses`), and each domain's pause and back-off (`domain_state`)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    false,
)
from sqlalchemy import text as sql_text  # `text` is also a column of `pages`
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

CONTENT_TYPE_LENGTH = 255
EXIT_ID_LENGTH = 64
ETAG_LENGTH = 512
LAST_MODIFIED_LENGTH = 64
LANG_LENGTH = 16
REFUSAL_LENGTH = 32
# A page's content columns (docs/content.md), on `pages` and on each of its versions.
CONTENT = ("markdown", "text", "lang", "simhash", "near_duplicate_of", "content_refused")
ID = BigInteger().with_variant(Integer, "sqlite")


class Base(DeclarativeBase):
    """Declarative base; the naming convention keeps constraint names equal to the migration's."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "pk": "pk_%(table_name)s",
            "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        }
    )


class Page(Base):
    """One crawled URL (the `pages` table)."""

    __tablename__ = "pages"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    url: Mapped[str] = mapped_column(Text, unique=True, nullable=False)
    final_url: Mapped[str | None] = mapped_column(Text)
    domain: Mapped[str] = mapped_column(String(253), index=True)
    status_code: Mapped[int | None] = mapped_column(Integer)
    content_type: Mapped[str | None] = mapped_column(String(CONTENT_TYPE_LENGTH))
    error: Mapped[str | None] = mapped_column(Text)
    depth: Mapped[int] = mapped_column(Integer)
    title: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    fetched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    attempts: Mapped[int] = mapped_column(Integer)
    credits: Mapped[float] = mapped_column(Float, server_default="0")
    exit_id: Mapped[str | None] = mapped_column(String(EXIT_ID_LENGTH))
    # The crawl that stored this row: one row per URL, the latest crawl's (docs/api.md).
    crawl_id: Mapped[str | None] = mapped_column(String(64), index=True)
    rendered: Mapped[bool] = mapped_column(Boolean, server_default=false())
    etag: Mapped[str | None] = mapped_column(String(ETAG_LENGTH))
    last_modified: Mapped[str | None] = mapped_column(String(LAST_MODIFIED_LENGTH))
    signature: Mapped[str | None] = mapped_column(String(64))
    changed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    found: Mapped[str | None] = mapped_column(String(16))
    fetch_interval: Mapped[float | None] = mapped_column(Float)
    next_fetch_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    gone: Mapped[int] = mapped_column(Integer, server_default="0")
    version: Mapped[int | None] = mapped_column(Integer)  # its newest row in page_versions (None: none)
    # Where its latest answer is in the WARC archive (crawler/archive/; None: not archived): the
    # file, the byte range of its records, and the payload's digest and date a revisit refers to.
    warc_file: Mapped[str | None] = mapped_column(String(1024))  # a file name, or an object URL
    warc_offset: Mapped[int | None] = mapped_column(BigInteger)
    warc_length: Mapped[int | None] = mapped_column(Integer)
    warc_digest: Mapped[str | None] = mapped_column(String(64))
    warc_date: Mapped[str | None] = mapped_column(String(32))
    # Its content, with `content:` on (crawler/content/, docs/content.md): main content as Markdown
    # and plain text (a document's text), its language, the simhash of its text (16 hex digits: 64
    # unsigned bits fit no SQL integer), the page stored first within the near-duplicate distance,
    # and why its body was not made into content (a Refusal code).
    markdown: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str | None] = mapped_column(Text)
    lang: Mapped[str | None] = mapped_column(String(LANG_LENGTH))
    simhash: Mapped[str | None] = mapped_column(String(16))
    near_duplicate_of: Mapped[str | None] = mapped_column(Text)
    content_refused: Mapped[str | None] = mapped_column(String(REFUSAL_LENGTH))
    # The expectations its data failed (docs/quality.md), each {"name", "reason"}; None: it met them
    # all, or none was checked (migration 0012).
    expectations: Mapped[list[dict[str, str]] | None] = mapped_column(JSON(none_as_null=True))

    __table_args__ = (
        # Only scheduled rows: a domain's due query reads the index alone, in order (migration 0005).
        Index(
            "ix_pages_domain_next_fetch_at",
            "domain",
            "next_fetch_at",
            postgresql_where=sql_text("next_fetch_at IS NOT NULL"),
            sqlite_where=sql_text("next_fetch_at IS NOT NULL"),
        ),
    )


class PageVersion(Base):
    """One stored answer of a page that differed from the one before (the `page_versions` table):
    the first, a change of what a reader sees, the page gone (404, 410) or back."""

    __tablename__ = "page_versions"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    page_id: Mapped[int] = mapped_column(ID, ForeignKey("pages.id", ondelete="CASCADE"), nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False)  # 1, 2, ... per page
    kind: Mapped[str] = mapped_column(String(8), nullable=False)  # new, changed, gone, back
    fetched_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    status_code: Mapped[int | None] = mapped_column(Integer)
    signature: Mapped[str | None] = mapped_column(String(64))
    title: Mapped[str | None] = mapped_column(Text)
    data: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    crawl_id: Mapped[str | None] = mapped_column(String(64))
    # Its content then (as `pages`' columns; None with `content:` off, and in a `gone` version):
    # the change feed publishes it, and a version published again reads it from here.
    markdown: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str | None] = mapped_column(Text)
    lang: Mapped[str | None] = mapped_column(String(LANG_LENGTH))
    simhash: Mapped[str | None] = mapped_column(String(16))
    near_duplicate_of: Mapped[str | None] = mapped_column(Text)
    content_refused: Mapped[str | None] = mapped_column(String(REFUSAL_LENGTH))

    __table_args__ = (UniqueConstraint("page_id", "version", name="uq_page_versions_page_id_version"),)


class Reparse(Base):
    """A run of `crawler reparse` (the `reparses` table): its filters, and the last page it has done,
    committed with that page's row, so a stopped run resumes after it."""

    __tablename__ = "reparses"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    filters: Mapped[str] = mapped_column(Text, nullable=False)  # canonical JSON of its options
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_page_id: Mapped[int] = mapped_column(ID, server_default="0")
    pages: Mapped[int] = mapped_column(Integer, server_default="0")
    changed: Mapped[int] = mapped_column(Integer, server_default="0")
    failed: Mapped[int] = mapped_column(Integer, server_default="0")
    links: Mapped[int] = mapped_column(Integer, server_default="0")


class SitemapFile(Base):
    """A sitemap file as its last reading found it (the `sitemaps` table): its validators and
    signature, to skip an unchanged one, and what its URLs became."""

    __tablename__ = "sitemaps"

    id: Mapped[int] = mapped_column(ID, primary_key=True, autoincrement=True)
    url: Mapped[str] = mapped_column(Text, unique=True, nullable=False)
    domain: Mapped[str] = mapped_column(String(253), index=True)
    depth: Mapped[int] = mapped_column(Integer)  # indexes above it
    read_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    outcome: Mapped[str] = mapped_column(String(16))  # read, not_modified, unchanged, failed, ...
    status_code: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str | None] = mapped_column(String(16))  # urlset, sitemapindex, text, rss, atom
    etag: Mapped[str | None] = mapped_column(String(ETAG_LENGTH))
    last_modified: Mapped[str | None] = mapped_column(String(LAST_MODIFIED_LENGTH))
    signature: Mapped[str | None] = mapped_column(String(64))
    counts: Mapped[dict[str, int] | None] = mapped_column(JSON)  # what its entries became, by outcome
    note: Mapped[str | None] = mapped_column(Text)  # why it failed, or where it was cut


class SitemapOrigin(Base):
    """An origin whose sitemaps are read (the `sitemap_origins` table): the crawl its URLs join, when
    its last round of reading began, and when the host layout's scheduler looks at it next."""

    __tablename__ = "sitemap_origins"

    origin: Mapped[str] = mapped_column(String(300), primary_key=True)
    domain: Mapped[str] = mapped_column(String(253), index=True)
    crawl_id: Mapped[str | None] = mapped_column(String(64))
    round_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # The layout's domains differ in `recrawl.every`: claimed by this, not by `round_at`, an origin not
    # yet due never stands before one that is.
    due_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class DomainState(Base):
    """What the fleet must keep of a domain where a Redis loss cannot reach it (the `domain_state`
    table): whether a person paused it, and its last back-off (a site's 429 or 503)."""

    __tablename__ = "domain_state"

    domain: Mapped[str] = mapped_column(String(253), primary_key=True)
    paused_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The rate limiter's own figures, in the Redis server's clock (Unix seconds): the share of the
    # rate left, when it was last lowered, and no request before `held_until` (a Retry-After).
    backoff_factor: Mapped[float | None] = mapped_column(Float)
    backoff_at: Mapped[float | None] = mapped_column(Float)
    held_until: Mapped[float | None] = mapped_column(Float)
