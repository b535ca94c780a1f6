"""Reading archived answers fast, for a reparse: each file opened once for the pages it holds, read in
offset order, and an exchange's gzip members inflated in memory and parsed by warcio from there.

warcio's own iterator reads through a line-buffered stream of its own, which cost as much as the
extraction itself; anything this path does not expect (a cut member, no response first) is read
again by `crawler.archive.read`, which says what is wrong.
"""

from __future__ import annotations

import contextlib
import io
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import IO

from warcio.recordloader import ArcWarcRecordLoader

from crawler.archive import Archived, Stored, read
from crawler.archive.builder import RENAMED_PREFIX
from crawler.archive.source import ArchiveSource
from crawler.errors import ArchiveError
from crawler.storage import is_object_url

_LOADER = ArcWarcRecordLoader(verify_http=False)  # as warcio's ArchiveIterator parses records
_GZIP = zlib.MAX_WBITS | 16


@dataclass(frozen=True, slots=True)
class Answer:
    """An archived answer; `truncated`: its body was never read (WARC-Truncated), only its headers."""

    stored: Stored
    truncated: bool = False


# Records of one file read from object storage in one ranged GET while they lie this close together,
# up to a span this long: a batch's pages of one file are mostly neighbours.
GAP = 256 * 1024
SPAN = 16 * 1024 * 1024


class ArchiveFile:
    """One file of the archive, open while the pages it holds are read (a `with` block): a local file
    (in the directory, or the spool while its upload waits), else its object in object storage, the
    records `wanted` read in a few ranged GETs."""

    def __init__(self, source: ArchiveSource, name: str, wanted: Sequence[Archived] = ()) -> None:
        self._source = source
        self._name = name
        self._wanted = sorted(wanted, key=lambda a: a.offset)
        self._file: IO[bytes] | None = None
        self._spans: dict[int, tuple[int, int]] = {}  # a record's offset -> its span's (start, end)
        self._read: dict[tuple[int, int], bytes] = {}

    def __enter__(self) -> ArchiveFile:
        try:
            path = self._source.local(self._name)
        except ArchiveError:
            return self  # not a file of the archive: `read` says so, page by page
        if path is not None:
            # Not readable: `read` names the trouble, page by page.
            with contextlib.suppress(OSError):
                self._file = path.open("rb")
        elif is_object_url(self._name):
            self._plan()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()

    def _plan(self) -> None:
        start = end = -1
        members: list[int] = []
        for archived in self._wanted:
            stop = archived.offset + archived.length
            if members and archived.offset - end <= GAP and stop - start <= SPAN:
                end = max(end, stop)
            else:
                self._spans.update({offset: (start, end) for offset in members})
                start, end, members = archived.offset, stop, []
            members.append(archived.offset)
        self._spans.update({offset: (start, end) for offset in members})

    def _bytes(self, archived: Archived) -> bytes | None:
        if self._file is not None:
            self._file.seek(archived.offset)
            return self._file.read(archived.length)
        span = self._spans.get(archived.offset)
        if span is None or archived.offset + archived.length > span[1]:
            return None
        if span not in self._read:
            self._read.clear()  # spans come in offset order: one held at a time
            whole = Archived(self._name, span[0], span[1] - span[0], archived.digest, archived.date)
            try:
                self._read[span] = self._source.record(whole)
            except ArchiveError:
                return None
        start = archived.offset - span[0]
        return self._read[span][start : start + archived.length]

    def answer(self, archived: Archived, limit: int) -> Answer:
        """The answer whose records `archived` points at, none inflating past `limit` bytes;
        ArchiveError if they cannot be read (or inflate further: a gzip bomb is not held)."""
        data = self._bytes(archived)
        if data is not None:
            found = _parsed(data, archived.length, limit)
            if found is not None:
                return found
        return Answer(read(self._source, archived, limit))  # raises ArchiveError, saying what is wrong


def _parsed(data: bytes, length: int, limit: int) -> Answer | None:
    """The response (and conversion) of an exchange's records; None if they are not as written;
    ArchiveError if one inflates past `limit` bytes."""
    if len(data) < length:
        return None
    try:
        found: Answer | None = None
        for member in _members(data, limit):
            record = _LOADER.parse_record_stream(io.BytesIO(member), no_record_parse=found is not None)
            kind = record.rec_type
            if found is None:
                if kind != "response" or record.http_headers is None:
                    return None
                http = record.http_headers
                payload = record.content_stream().read()
                if http.total_len + len(payload) != int(record.length):
                    return None  # short: cut
                stored = Stored(
                    record.rec_headers.get_header("WARC-Target-URI"),
                    record.rec_headers.get_header("WARC-Date"),
                    int(http.get_statuscode()),
                    [(n, v) for n, v in http.headers if not n.startswith(RENAMED_PREFIX)],
                    payload,
                )
                truncated = record.rec_headers.get_header("WARC-Truncated") is not None
                found = Answer(stored, truncated)
            elif kind == "conversion":  # the DOM a browser made of the page (render_js)
                dom = record.raw_stream.read()
                s = found.stored
                found = Answer(Stored(s.url, s.date, s.status, s.headers, s.body, dom), found.truncated)
            else:
                break  # the request: an exchange's last record
        return found
    except _TooLong:
        raise ArchiveError(f"a record inflates past {limit} bytes: not read") from None
    except Exception:  # warcio's and zlib's many errors: whatever it is, `read` says it better
        return None


class _TooLong(Exception):
    """A gzip member inflates past the limit."""


def _members(data: bytes, limit: int) -> Iterator[bytes]:
    """Each gzip member of `data`, inflated up to `limit` bytes; _TooLong past it, ArchiveError at
    a member that is cut."""
    while data:
        inflater = zlib.decompressobj(_GZIP)
        member = inflater.decompress(data, limit + 1)
        if len(member) > limit:
            raise _TooLong
        if not inflater.eof:
            raise ArchiveError("a gzip member is cut")
        yield member
        data = inflater.unused_data
