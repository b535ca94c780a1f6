"""Page versions: which stored answers are new versions of their page, written in the row's transaction.

A version is written when a page is first stored with an answer (`new`), when what a reader sees
changed (`changed`: its signature differs from its latest version's), when it answers 404 or 410
(`gone`) and when it answers again after that (`back`); never for an unchanged fetch, a 304, or a
failure (a 5xx, a timeout), and never for a first answer that is already gone (a broken link). Each
is decided against the page's latest version in the same transaction that stores its row, so a
redelivered message finds its version written and writes none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from crawler.sink.tables import CONTENT, Page, PageVersion

Kind = Literal["new", "changed", "gone", "back", "reparse"]
CHANGES: tuple[Kind, ...] = ("changed", "reparse")  # kinds whose feed message says what changed
GONE = frozenset({404, 410})


@dataclass(frozen=True, slots=True)
class Latest:
    """A stored page and its latest version (`version` None: it has none yet)."""

    page_id: int
    version: int | None
    status_code: int | None
    signature: str | None
    title: str | None
    data: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class Version:
    """A page's version as the change feed tells it; `changes` (field: old, new) for `changed`, and
    its content columns (docs/content.md; None: it has none, as with `content:` off)."""

    page_id: int
    url: str
    domain: str
    crawl: str | None
    version: int
    fetched_at: datetime
    kind: Kind
    changes: Mapping[str, tuple[Any, Any]] | None = None
    content: Mapping[str, str | None] | None = None

    @property
    def message_id(self) -> str:
        """Stable per (page, version): a subscriber drops a copy it has seen."""
        return f"{self.page_id}:{self.version}"


def may_make(row: Mapping[str, Any], keep: frozenset[str]) -> bool:
    """Whether `row` can make a version at all: not an unchanged fetch (its status kept), an answer."""
    return "status_code" not in keep and row["status_code"] is not None


def kind_of(latest: Latest | None, row: Mapping[str, Any], keep: frozenset[str]) -> Kind | None:
    """What the stored row `row` is to its page's latest version; None if it is no new version."""
    if not may_make(row, keep):
        return None
    gone = row["status_code"] in GONE
    if latest is None or latest.version is None:
        return "new" if not gone and row["error"] is None else None
    was_gone = latest.status_code in GONE
    if gone:
        return None if was_gone else "gone"
    if row["error"] is not None:
        return None
    if was_gone:
        return "back"
    return "changed" if row["signature"] != latest.signature else None


def changes(latest: Latest, row: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """The fields whose value changed, the title among them: name -> (old, new)."""
    out: dict[str, tuple[Any, Any]] = {}
    if latest.title != row["title"]:
        out["title"] = (latest.title, row["title"])
    old, new = latest.data or {}, row["data"] or {}
    for name in sorted(old.keys() | new.keys()):
        if old.get(name) != new.get(name):
            out[name] = (old.get(name), new.get(name))
    return out


def content_of(columns: Mapping[Any, Any]) -> dict[str, str | None] | None:
    """The content among a row's `columns`; None if it has none (`content:` off, or a `gone` version)."""
    found = {name: columns.get(name) for name in CONTENT}
    return found if any(value is not None for value in found.values()) else None


def latest(conn: Connection, urls: Sequence[str]) -> dict[str, Latest]:
    """The stored pages among `urls`, each with its latest version."""
    if not urls:
        return {}
    v = PageVersion
    stmt = (
        select(Page.url, Page.id, Page.version, v.status_code, v.signature, v.title, v.data)
        .outerjoin(v, (v.page_id == Page.id) & (v.version == Page.version))
        .where(Page.url.in_(urls))
    )
    return {row[0]: Latest(*row[1:]) for row in conn.execute(stmt)}


@dataclass(slots=True)
class Planned:
    """A version to write once its page's row is stored."""

    row: dict[str, Any]
    number: int
    kind: Kind
    latest: Latest | None


def plan(
    rows: Sequence[tuple[dict[str, Any], frozenset[str]]], known: Mapping[str, Latest]
) -> dict[str, Planned]:
    """Per url, the version each of `rows` (a row and the columns it keeps) makes, if any."""
    planned: dict[str, Planned] = {}
    for row, keep in rows:
        before = known.get(row["url"])
        kind = kind_of(before, row, keep)
        if kind is not None:
            number = (before.version or 0) + 1 if before is not None else 1
            planned[row["url"]] = Planned(row, number, kind, before)
    return planned


def write(conn: Connection, planned: Mapping[str, Planned]) -> dict[str, Version]:
    """Insert the planned versions (their pages' rows are stored); per url, the version written."""
    if not planned:
        return {}
    ids = {url: p.latest.page_id for url, p in planned.items() if p.latest is not None}
    missing = [url for url in planned if url not in ids]
    if missing:
        ids.update(
            (url, id_) for url, id_ in conn.execute(select(Page.url, Page.id).where(Page.url.in_(missing)))
        )
    rows, written = [], {}
    for url, p in planned.items():
        content = p.kind != "gone"  # a gone page's last content stays in the version before
        made = content_of(p.row) if content else None
        rows.append(
            {
                "page_id": ids[url],
                "version": p.number,
                "kind": p.kind,
                "fetched_at": p.row["fetched_at"],
                "status_code": p.row["status_code"],
                "signature": p.row["signature"] if content else None,
                "title": p.row["title"] if content else None,
                "data": p.row["data"] if content else None,
                "crawl_id": p.row["crawl_id"],
                **(made or dict.fromkeys(CONTENT)),
            }
        )
        diff = changes(p.latest, p.row) if p.kind in CHANGES and p.latest is not None else None
        row = p.row
        written[url] = Version(
            ids[url], url, row["domain"], row["crawl_id"], p.number, row["fetched_at"], p.kind, diff, made
        )
    conn.execute(insert(PageVersion), rows)
    return written


def after(conn: Connection, url: str, number: int) -> list[Version]:
    """The versions of the page at `url` newer than `number`, oldest first, as written."""
    v = PageVersion
    stmt = (
        select(Page.id, Page.domain, v.version, v.kind, v.fetched_at, v.crawl_id, v.status_code)
        .add_columns(v.signature, v.title, v.data, *(getattr(v, name) for name in CONTENT))
        .join(v, v.page_id == Page.id)
        .where(Page.url == url, v.version >= max(number, 1))  # the one before, for the first's changes
        .order_by(v.version)
    )
    out, before = [], None
    for row in conn.execute(stmt).mappings():
        page_id, n, kind, title, data = row["id"], row["version"], row["kind"], row["title"], row["data"]
        if n > number:
            diff = None
            if kind in CHANGES and before is not None:
                diff = changes(before, {"title": title, "data": data})
            when, made = row["fetched_at"], content_of(row)
            out.append(Version(page_id, url, row["domain"], row["crawl_id"], n, when, kind, diff, made))
        before = Latest(page_id, n, row["status_code"], row["signature"], title, data)
    return out
