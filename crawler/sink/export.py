"""`crawler export`: the pages table, or every version of its pages (`--history`), as JSON lines, CSV
or Parquet, streamed in constant memory.

Rows come from a server-side cursor (PostgreSQL) or SQLite's own stepping cursor, BATCH at a time.
CSV and Parquet put each `data` field in a column of its own; knowing the columns takes a first
pass over `data` alone, which holds only the set of field names and their types.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Select, func, select

from crawler.errors import ConfigError, NotFound
from crawler.sink.database import Database, opened
from crawler.sink.tables import Page, PageVersion
from crawler.storage import PartWriter

FORMATS = ("jsonl", "csv", "parquet")
BATCH = 2_000
UPLOAD_BUFFER = 1 << 20  # text gathered before it goes to an upload's part buffer
DATA_PREFIX = "data."  # a CSV or Parquet column of an extracted field: this, then the field's name
COLUMNS = (
    "id",
    "url",
    "final_url",
    "domain",
    "status_code",
    "content_type",
    "error",
    "depth",
    "title",
    "fetched_at",
    "attempts",
    "markdown",
    "text",
    "lang",
)
# `--dataset`: one JSON record per page with content, as a corpus pipeline reads it (docs/data.md).
DATASET_COLUMNS = ("url", "title", "lang", "markdown", "fetched_at", "digest")


@dataclass(frozen=True, slots=True)
class Query:
    """Which rows to export: one domain's (None: all), fetched at or after `since` (None: any time);
    with `history`, every version instead of each page; with `changed_since`, only pages with a version
    fetched after it."""

    domain: str | None = None
    since: datetime | None = None
    history: bool = False
    changed_since: datetime | None = None
    dataset: bool = False
    invalid: bool = False  # only pages that failed an expectation, each with its failures


@dataclass(frozen=True, slots=True)
class _Shape:
    """What an exported row is: its fixed columns (name -> SQL column), then `data`; Parquet types of
    the fixed columns that are not text."""

    columns: Mapping[str, Any]
    data: Any
    types: Mapping[str, str]

    def select(self) -> list[Any]:
        return [*self.columns.values(), self.data]


_PAGES = _Shape(
    {name: getattr(Page, name) for name in COLUMNS},
    Page.data,
    {"id": "int64", "status_code": "int32", "depth": "int32", "attempts": "int32", "fetched_at": "time"},
)
# `--history`: one row per version, its page's url, domain and id first.
_VERSIONS = _Shape(
    {
        "url": Page.url,
        "domain": Page.domain,
        "page_id": PageVersion.page_id,
        "version": PageVersion.version,
        "kind": PageVersion.kind,
        "fetched_at": PageVersion.fetched_at,
        "status_code": PageVersion.status_code,
        "title": PageVersion.title,
        "crawl": PageVersion.crawl_id,
    },
    PageVersion.data,
    {"page_id": "int64", "version": "int32", "status_code": "int32", "fetched_at": "time"},
)
VERSION_COLUMNS = tuple(_VERSIONS.columns)


# `--invalid`: the pages' columns, then the expectations each failed ({"name", "reason"} each).
_INVALID = _Shape({**_PAGES.columns, "expectations": Page.expectations}, Page.data, _PAGES.types)


def _shape(query: Query) -> _Shape:
    return _VERSIONS if query.history else _INVALID if query.invalid else _PAGES


@dataclass(slots=True)
class _FieldColumns:
    """The `data` fields seen in a first pass, in order of appearance, with the kinds of their values."""

    kinds: dict[str, set[str]] = field(default_factory=dict)

    def see(self, data: Any) -> None:
        if not isinstance(data, dict):
            return
        for key, value in data.items():
            self.kinds.setdefault(key, set()).add(_kind(value))

    def names(self) -> dict[str, str]:
        """Field -> its column's name: `data.` and the field, every one alike (a field may be named like
        a fixed column, `title` say, and a reader tells them apart by the prefix alone)."""
        return {key: f"{DATA_PREFIX}{key}" for key in self.kinds}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "json"  # lists and groups: JSON text in a CSV cell or Parquet string


def export(
    database: Database | str,
    fmt: str,
    out: Path | PartWriter | None,
    query: Query = Query(),
    batch: int = BATCH,
) -> int:
    """Write the selected rows to `out` (a file, an object being uploaded, or stdout if None) in
    `fmt`; return how many were written."""
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}: use one of {', '.join(FORMATS)}")
    if query.dataset and (fmt != "jsonl" or query.history):
        raise ConfigError(
            "--dataset writes JSON lines of pages: use it with --format jsonl, without --history"
        )
    if query.invalid and (fmt == "parquet" or query.history or query.dataset):
        raise ConfigError(
            "--invalid lists failing pages as JSON lines or CSV: use --format jsonl or csv, "
            "without --history or --dataset"
        )
    if fmt == "parquet":
        _need_pyarrow()
        if out is None:
            raise ConfigError("--format parquet writes a file: give --out FILE or --to s3://BUCKET/KEY")
    with opened(database) as db, db.errors(f"exporting from {db.redacted} failed"):
        engine = db.engine
        if query.domain is not None:
            _known(engine, query.domain)
        with ExitStack() as stack:
            if fmt == "parquet":
                assert out is not None
                return _parquet(engine, query, out, batch)
            if out is None:
                stream: IO[str] = sys.stdout
            elif isinstance(out, PartWriter):
                stream = io.TextIOWrapper(io.BufferedWriter(out, UPLOAD_BUFFER), encoding="utf-8", newline="")
                stack.callback(_detached, stream)  # flushed into the upload, which its owner ends
            else:
                stream = stack.enter_context(out.open("w", encoding="utf-8", newline=""))
            if query.dataset:
                return _dataset(engine, query, stream, batch)
            if fmt == "jsonl":
                return _jsonl(engine, query, stream, batch)
            return _csv(engine, query, stream, batch)


def _detached(stream: io.TextIOWrapper) -> None:
    stream.flush()
    stream.detach()


def _known(engine: Any, domain: str) -> None:
    """NotFound, naming the domains that have pages, unless `domain` has some."""
    with engine.connect() as conn:
        if conn.execute(select(Page.id).where(Page.domain == _domain(domain)).limit(1)).first():
            return
        stored = conn.execute(select(Page.domain).distinct().order_by(Page.domain).limit(21)).scalars().all()
    listed = ", ".join(stored[:20]) + (" ..." if len(stored) > 20 else "") if stored else "none yet"
    raise NotFound(f"--domain {domain}: no page of that domain is stored (domains with pages: {listed})")


def _domain(domain: str) -> str:
    return domain.lower().rstrip(".")


def _select(query: Query, *columns: Any) -> Select[Any]:
    if query.history:
        # A page's versions are written in order, so id order is each page's version order too.
        stmt = select(*columns).select_from(PageVersion).join(Page, Page.id == PageVersion.page_id)
        stmt, fetched = stmt.order_by(PageVersion.id), PageVersion.fetched_at
    else:
        stmt, fetched = select(*columns).order_by(Page.id), Page.fetched_at
    if query.domain is not None:
        stmt = stmt.where(Page.domain == _domain(query.domain))
    if query.since is not None:
        stmt = stmt.where(fetched >= query.since.astimezone(UTC))
    if query.changed_since is not None:
        # IN, not a correlated EXISTS: the versions' time index finds the few recent ones first.
        changed = select(PageVersion.page_id).where(
            PageVersion.fetched_at > query.changed_since.astimezone(UTC)
        )
        stmt = stmt.where(Page.id.in_(changed))
    if query.invalid:
        stmt = stmt.where(Page.expectations.is_not(None))
    return stmt


def _rows(engine: Any, stmt: Select[Any], batch: int) -> Iterator[Sequence[Any]]:
    # stream_results: a server-side cursor on PostgreSQL, so the driver never holds the whole result.
    with engine.connect() as conn:
        result = conn.execution_options(stream_results=True, yield_per=batch).execute(stmt)
        for part in result.partitions():
            yield from part


def _plain(name: str, value: Any) -> Any:
    if name == "fetched_at" and isinstance(value, datetime):
        # SQLite hands back naive times; every stored time is UTC (see PageRecord).
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value


def _jsonl(engine: Any, query: Query, stream: IO[str], batch: int) -> int:
    shape = _shape(query)
    count = 0
    for row in _rows(engine, _select(query, *shape.select()), batch):
        record = {name: _plain(name, value) for name, value in zip(shape.columns, row, strict=False)}
        record["data"] = row[-1]
        stream.write(json.dumps(record, ensure_ascii=False))
        stream.write("\n")
        count += 1
    return count


def _dataset(engine: Any, query: Query, stream: IO[str], batch: int) -> int:
    """Pages with content: a document's text stands for its Markdown; `digest` is the SHA-256 of
    that Markdown, for a pipeline's exact dedup."""
    content = func.coalesce(Page.markdown, Page.text)
    stmt = _select(query, Page.url, Page.title, Page.lang, content, Page.fetched_at).where(
        content.is_not(None)
    )
    count = 0
    for url, title, lang, markdown, fetched_at in _rows(engine, stmt, batch):
        digest = "sha256:" + hashlib.sha256(markdown.encode()).hexdigest()
        record = dict(
            zip(
                DATASET_COLUMNS,
                (url, title, lang, markdown, _plain("fetched_at", fetched_at), digest),
                strict=True,
            )
        )
        stream.write(json.dumps(record, ensure_ascii=False))
        stream.write("\n")
        count += 1
    return count


def _field_columns(engine: Any, query: Query, batch: int) -> _FieldColumns:
    fields = _FieldColumns()
    for (data,) in _rows(engine, _select(query, _shape(query).data), batch):
        fields.see(data)
    return fields


def _cell(value: Any) -> Any:
    if isinstance(value, list | dict):
        return _inert(json.dumps(value, ensure_ascii=False))
    return _inert(value)


# A spreadsheet takes a cell starting with one of these for a formula (OWASP, "CSV Injection"): a
# crawled page could make =HYPERLINK(...) run on whoever opens the export.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _inert(value: Any) -> Any:
    """A text cell made inert: prefixed with ' when a spreadsheet would read it as a formula. Numbers
    (typed, not text) are left as they are; the csv writer quotes whatever needs it."""
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _csv(engine: Any, query: Query, stream: IO[str], batch: int) -> int:
    shape = _shape(query)
    names = _field_columns(engine, query, batch).names()
    writer = csv.writer(stream)
    writer.writerow([_inert(name) for name in (*shape.columns, *names.values())])
    count = 0
    for row in _rows(engine, _select(query, *shape.select()), batch):
        data = row[-1] if isinstance(row[-1], dict) else {}
        fixed = [_cell(_plain(name, value)) for name, value in zip(shape.columns, row, strict=False)]
        writer.writerow([*fixed, *(_cell(data.get(key)) for key in names)])
        count += 1
    return count


def _need_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--format parquet needs pyarrow, an extra: pip install -e '.[parquet]' in a checkout"
        ) from None


def _parquet(engine: Any, query: Query, out: Path | PartWriter, batch: int) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    shape = _shape(query)
    fixed = list(shape.columns)
    fields = _field_columns(engine, query, batch)
    names = fields.names()
    types = {"int64": pa.int64(), "int32": pa.int32(), "time": pa.timestamp("us", tz="UTC")}
    schema_fields = [
        pa.field(name, types[shape.types[name]] if name in shape.types else pa.string()) for name in fixed
    ]
    converters: list[Any] = []
    for key, column in names.items():
        kinds = fields.kinds[key] - {"null"}
        converter: Callable[[Any], Any] | None
        if kinds == {"bool"}:
            kind, converter = pa.bool_(), None
        elif kinds and kinds <= {"int"}:
            kind, converter = pa.int64(), None
        elif kinds and kinds <= {"int", "float"}:
            kind, converter = pa.float64(), _to_float
        else:  # text, lists, groups or a mix: text, JSON where it is not a string already
            kind, converter = pa.string(), _to_text
        schema_fields.append(pa.field(column, kind))
        converters.append(converter)
    schema = pa.schema(schema_fields)
    count = 0
    with pq.ParquetWriter(out, schema, compression="zstd") as writer:
        columns: list[list[Any]] = [[] for _ in schema_fields]
        for row in _rows(engine, _select(query, *shape.select()), batch):
            for i, value in enumerate(row[:-1]):
                if fixed[i] == "fetched_at" and isinstance(value, datetime) and value.tzinfo is None:
                    value = value.replace(tzinfo=UTC)
                columns[i].append(value)
            data = row[-1] if isinstance(row[-1], dict) else {}
            for j, (key, convert) in enumerate(zip(names, converters, strict=True)):
                value = data.get(key)
                columns[len(fixed) + j].append(convert(value) if convert and value is not None else value)
            count += 1
            if len(columns[0]) >= batch:
                writer.write_batch(pa.record_batch(columns, schema=schema))
                columns = [[] for _ in schema_fields]
        if columns[0] or count == 0:
            writer.write_batch(pa.record_batch(columns, schema=schema))
    return count


def _to_float(value: Any) -> float:
    return float(value)


def _to_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def parse_since(text: str, flag: str = "--since") -> datetime:
    """An ISO 8601 date or time for `flag` (--since, --changed-since); a time without an offset is UTC."""
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r}: expected an ISO 8601 date or time, e.g. 2024-05-01T08:00"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


__all__ = ["DATASET_COLUMNS", "FORMATS", "VERSION_COLUMNS", "Query", "export", "parse_since"]
