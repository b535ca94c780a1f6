"""A sitemap's bytes out of its chunks as fetched: gunzipped if they begin with gzip's magic bytes (a
`.xml.gz` is served under any name and type), a bounded piece at a time, and cut at a cap.

zlib's max_length bounds each step's output, so a gzip bomb never expands past the cap nor holds more
than a piece: memory stays flat whatever the input.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from crawler.parse.sitemaps.report import SitemapReport

PIECE = 64 * 1024
GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS


class Body:
    """Feeds chunks in, yields the body's pieces; notes a cut (cap, corrupt or short gzip) in the report."""

    def __init__(self, report: SitemapReport, limit: int) -> None:
        self._report = report
        self._limit = limit
        self._head = b""  # the first byte, until a second one says whether it is gzip
        self._inflate: zlib._Decompress | None = None
        self._started = False
        self._pending = b""  # a byte after a gzip member's end, until the next says if a member follows

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """The body's pieces decoded from `chunk`, each at most PIECE bytes."""
        report = self._report
        if report.truncated is not None:
            return
        report.bytes_read += len(chunk)
        if not self._started:
            self._head += chunk
            if len(self._head) < len(GZIP_MAGIC):
                return
            chunk, self._head = self._head, b""
            self._start(chunk)
        if self._inflate is not None and report.bytes_read > self._limit:
            # A gzip stream can grow without output (empty members, stored blocks): its own bytes count too.
            report.truncate(f"more than {self._limit} bytes read (gzipped)")
            return
        yield from self._capped(self._gunzip(chunk) if self._inflate is not None else _split(chunk))

    def close(self) -> Iterator[bytes]:
        """What is left once the input has ended; notes a gzip stream that stopped before its end."""
        if self._report.truncated is not None:
            return
        if not self._started:
            self._start(self._head)
            yield from self._capped(_split(self._head))
        elif self._inflate is not None and not self._inflate.eof:
            self._report.truncate(f"gzip stream cut short after {self._report.bytes_uncompressed} bytes")

    def _start(self, head: bytes) -> None:
        self._started = True
        if head.startswith(GZIP_MAGIC):
            self._report.gzip = True
            self._inflate = zlib.decompressobj(_GZIP_WBITS)

    def _capped(self, pieces: Iterator[bytes]) -> Iterator[bytes]:
        report = self._report
        try:
            for piece in pieces:
                room = self._limit - report.bytes_uncompressed
                if len(piece) > room:
                    piece = piece[:room]
                    report.truncate(f"more than {self._limit} bytes uncompressed")
                report.bytes_uncompressed += len(piece)
                if piece:
                    yield piece
                if report.truncated is not None:
                    return
        except zlib.error as exc:
            report.truncate(f"gzip data corrupt after {report.bytes_uncompressed} bytes ({exc})")

    def _gunzip(self, data: bytes) -> Iterator[bytes]:
        assert self._inflate is not None
        data, self._pending = self._pending + data, b""
        while data:
            if self._inflate.eof:
                if len(data) < len(GZIP_MAGIC):
                    self._pending = data
                    return
                # Members may follow one another (RFC 1952); anything else after the end is ignored.
                if not data.startswith(GZIP_MAGIC):
                    return
                self._inflate = zlib.decompressobj(_GZIP_WBITS)
            out = self._inflate.decompress(data, PIECE)
            data = self._inflate.unused_data if self._inflate.eof else self._inflate.unconsumed_tail
            if out:
                yield out
            while not data and len(out) == PIECE:  # the input is used up, the output may not be
                out = self._inflate.decompress(b"", PIECE)
                if out:
                    yield out


def _split(data: bytes) -> Iterator[bytes]:
    for start in range(0, len(data), PIECE):
        yield data[start : start + PIECE]
