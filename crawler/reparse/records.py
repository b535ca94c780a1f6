"""Reading archived answers fast, for a reparse: each file opened once for the pages it holds, read in
offset order, and an exchange's gzip members inflated in memory and parsed by warcio from there.

warcio's own iterator reads through a line-buffered stream of its own, which cost as much as the
extraction itself; anything this path does not expect (a cut member, no response first) is read
again by `crawler.archive.read`, which says what is wrong.
"""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from warcio.recordloader import ArcWarcRecordLoader

from crawler.archive import Archived, Stored, read
from crawler.archive.builder import RENAMED_PREFIX
from crawler.archive.writer import OPEN
from crawler.errors import ArchiveError

_LOADER = ArcWarcRecordLoader(verify_http=False)  # as warcio's ArchiveIterator parses records
_GZIP = zlib.MAX_WBITS | 16


@dataclass(frozen=True, slots=True)
class Answer:
    """An archived answer; `truncated`: its body was never read (WARC-Truncated), only its headers."""

    stored: Stored
    truncated: bool = False


class ArchiveFile:
    """One file of the archive, open while the pages it holds are read (a `with` block)."""

    def __init__(self, directory: Path, name: str) -> None:
        self._directory = directory
        self._name = name
        self._file: IO[bytes] | None = None

    def __enter__(self) -> ArchiveFile:
        for path in (self._directory / self._name, self._directory / (self._name + OPEN)):
            try:
                self._file = path.open("rb")
                break
            except OSError:
                continue  # not there, or not readable: `read` names the trouble, page by page
        return self

    def __exit__(self, *exc: object) -> None:
        if self._file is not None:
            self._file.close()

    def answer(self, archived: Archived) -> Answer:
        """The answer whose records `archived` points at; ArchiveError if they cannot be read."""
        if self._file is not None:
            self._file.seek(archived.offset)
            found = _parsed(self._file.read(archived.length), archived.length)
            if found is not None:
                return found
        return Answer(read(self._directory, archived))  # raises ArchiveError, saying what is wrong


def _parsed(data: bytes, length: int) -> Answer | None:
    """The response (and conversion) of an exchange's records; None if they are not as written."""
    if len(data) < length:
        return None
    try:
        found: Answer | None = None
        for member in _members(data):
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
    except Exception:  # warcio's and zlib's many errors: whatever it is, `read` says it better
        return None


def _members(data: bytes) -> Iterator[bytes]:
    """Each gzip member of `data`, inflated; ArchiveError at one that is cut."""
    while data:
        inflater = zlib.decompressobj(_GZIP)
        member = inflater.decompress(data)
        if not inflater.eof:
            raise ArchiveError("a gzip member is cut")
        yield member
        data = inflater.unused_data
