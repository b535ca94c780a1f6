"""Reading the archive back: one exchange by where a row says it is, or every record of a file.

A process killed while writing leaves its file's last record cut: `records` stops there with a
warning (the rest of the file is whole), and `read` of that record raises ArchiveError.
"""

from __future__ import annotations

import io
import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from crawler.archive.builder import RENAMED_PREFIX
from crawler.archive.exchange import Archived
from crawler.archive.source import ArchiveSource
from crawler.errors import ArchiveError

log = logging.getLogger(__name__)
# What a record's headers may add to its payload's limit (the body's max_body_bytes) when it is read.
RECORD_HEADROOM = 64 * 1024
# The limit of a record read without one: the most any domain's max_body_bytes allows.
MOST_RECORD = 1_000_000_000 + RECORD_HEADROOM


@dataclass(frozen=True, slots=True)
class Stored:
    """An archived answer: its status, headers (as the site sent them) and payload; and the DOM a
    browser made of it, if it was rendered."""

    url: str
    date: str
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    rendered: bytes | None = None

    @property
    def content_type(self) -> str | None:
        """The Content-Type header, if any."""
        return next((value for name, value in self.headers if name.lower() == "content-type"), None)


def read(source: ArchiveSource | Path, archived: Archived, limit: int = MOST_RECORD) -> Stored:
    """The answer whose records `archived` points at (in a directory, or where `source` finds them:
    its spool, else object storage), each record's payload read up to `limit` bytes (inflated);
    ArchiveError if the file or record is not there, or a payload is longer."""
    if not isinstance(source, ArchiveSource):
        source = ArchiveSource(source)
    data = source.record(archived)
    where = source.where(archived.file)
    try:
        return _stored(ArchiveIterator(io.BytesIO(data)), where, archived, limit)
    except (ArchiveLoadFailed, zlib.error, EOFError, ValueError) as exc:
        raise ArchiveError(f"{where}: no readable record at {archived.offset}: {exc}") from None


def _bounded(record: Any, path: str, archived: Archived, limit: int) -> bytes:
    """A record's payload, inflated a piece at a time and never past `limit` (a gzip bomb stops there)."""
    payload: bytes = record.content_stream().read(limit + 1)
    if len(payload) > limit:
        raise ArchiveError(f"{path}: the record at {archived.offset} inflates past {limit} bytes: not read")
    return payload


def _stored(records: ArchiveIterator, path: str, archived: Archived, limit: int) -> Stored:
    found: Stored | None = None
    for record in records:
        if not record.format.startswith("warc"):
            # warcio reads bytes that are no WARC record as ARC, whose header line is any text.
            raise ArchiveError(f"{path}: no WARC record at {archived.offset}: not read")
        kind = record.rec_type
        if kind == "request":
            break  # an exchange's last record: nothing of the answer follows
        if kind == "response" and found is None:
            http = record.http_headers
            if http is None:
                raise ArchiveError(f"{path}: the response record at {archived.offset} has no HTTP headers")
            found = Stored(
                record.rec_headers.get_header("WARC-Target-URI"),
                record.rec_headers.get_header("WARC-Date"),
                int(http.get_statuscode()),
                _restored(http.headers),
                _bounded(record, path, archived, limit),
            )
        elif kind == "conversion" and found is not None:
            dom = _bounded(record, path, archived, limit)
            found = Stored(found.url, found.date, found.status, found.headers, found.body, dom)
    if found is None:
        raise ArchiveError(f"{path}: no response record at {archived.offset}")
    return found


def _restored(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    # The payload is stored decoded: its coding headers stay under their X-Crawler- names.
    return [(name, value) for name, value in headers if not name.startswith(RENAMED_PREFIX)]


@dataclass(frozen=True, slots=True)
class Record:
    """One whole record of a file (warcio's names): its type, WARC and HTTP headers, payload, offset."""

    rec_type: str
    rec_headers: Any
    http_headers: Any
    payload: bytes
    offset: int


def records(path: Path) -> Iterator[Record]:
    """Every whole record of a WARC file, in order; a cut last record ends it with a warning."""
    with path.open("rb") as file:
        iterator = ArchiveIterator(file)
        offset = 0
        try:
            for record in iterator:
                payload = record.content_stream().read()
                http = record.http_headers
                # warcio hands a cut record's payload over short, without a word.
                if (http.total_len if http is not None else 0) + len(payload) < record.length:
                    raise EOFError(f"{len(payload)} bytes of payload where its length says more")
                # Asked after the payload is read: asking reads the record to its end.
                offset = iterator.get_record_offset()
                yield Record(record.rec_type, record.rec_headers, http, payload, offset)
                offset += iterator.get_record_length()
        except (ArchiveLoadFailed, zlib.error, EOFError, ValueError) as exc:
            log.warning("%s: the record at byte %s is cut (%s); skipped", path, offset, exc)
