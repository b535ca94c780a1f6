"""Content-Encoding decoders that never produce more than a small piece at a time.

httpx inflates each network chunk whole: 64 KB of a gzip bomb become 64 MB in one call, and a
doubly gzipped or brotli one far more. These decoders yield at most about PIECE bytes per step, so
the body limit cuts a bomb after max_body_bytes of output without the memory ever holding more.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import brotli

from crawler.errors import BadResponse

PIECE = 64 * 1024
MAX_CODINGS = 3  # stacked Content-Encodings a response may declare
ACCEPT_ENCODING = "gzip, deflate, br"
_GZIP_MAGIC = b"\x1f\x8b"


class Decoder(Protocol):
    """Turns content-encoded bytes into the body, a bounded piece at a time."""

    def feed(self, data: bytes) -> Iterator[bytes]:
        """Pieces of body decoded from `data` (none of them much larger than PIECE)."""
        ...

    def flush(self) -> Iterator[bytes]:
        """What is left once the input has ended."""
        ...


class _Identity:
    def feed(self, data: bytes) -> Iterator[bytes]:
        for start in range(0, len(data), PIECE):
            yield data[start : start + PIECE]

    def flush(self) -> Iterator[bytes]:
        return iter(())


class _Zlib:
    """gzip (members concatenated, as RFC 1952 allows) or deflate (zlib-wrapped or raw)."""

    def __init__(self, gzip: bool) -> None:
        self._gzip = gzip
        self._wbits = 16 + zlib.MAX_WBITS if gzip else zlib.MAX_WBITS
        self._inflate = zlib.decompressobj(self._wbits)
        self._begun = False
        self._pending = b""  # a first byte or two, kept until they say what follows
        self._done = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        data = self._pending + data
        self._pending = b""
        while data and not self._done:
            if len(data) < 2 and (not self._begun or self._inflate.eof):
                self._pending = data
                return
            if not self._begun:
                self._begun = True
                if not self._gzip and not _zlib_header(data):
                    # Raw deflate (RFC 1951) sent as "deflate", as old IIS did and some still do.
                    self._wbits = -zlib.MAX_WBITS
                    self._inflate = zlib.decompressobj(self._wbits)
            if self._inflate.eof:
                # Another gzip member may follow one (RFC 1952); anything else after the end of
                # the stream is ignored, as browsers do.
                if not (self._gzip and data.startswith(_GZIP_MAGIC)):
                    self._done = True
                    return
                self._inflate = zlib.decompressobj(self._wbits)
            out = self._inflate.decompress(data, PIECE)
            # Past the end, the leftover is in unused_data (unconsumed_tail may repeat it).
            data = self._inflate.unused_data if self._inflate.eof else self._inflate.unconsumed_tail
            if out:
                yield out
            while not data and len(out) == PIECE:  # the input is used up, the output may not be
                out = self._inflate.decompress(b"", PIECE)
                if out:
                    yield out

    def flush(self) -> Iterator[bytes]:
        return iter(())


def _zlib_header(data: bytes) -> bool:
    cmf, flg = data[0], data[1]
    return cmf & 0x0F == 8 and (cmf * 256 + flg) % 31 == 0


class _Brotli:
    def __init__(self) -> None:
        self._inflate = brotli.Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        if self._inflate.is_finished():
            return
        out = self._inflate.process(data, output_buffer_limit=PIECE)
        # Output held back by the limit comes with further calls on no input, until none is left.
        while out:
            yield out
            out = self._inflate.process(b"", output_buffer_limit=PIECE)

    def flush(self) -> Iterator[bytes]:
        return iter(())


class _Chain:
    """Codings applied in turn (Content-Encoding: a, b means a first): undone last first."""

    def __init__(self, decoders: Sequence[Decoder]) -> None:
        self._decoders = list(decoders)

    def feed(self, data: bytes) -> Iterator[bytes]:
        return self._through(0, iter((data,)))

    def flush(self) -> Iterator[bytes]:
        for i, decoder in enumerate(self._decoders):
            yield from self._through(i + 1, decoder.flush())

    def _through(self, i: int, pieces: Iterator[bytes]) -> Iterator[bytes]:
        # Feeds `pieces` to decoder i and what comes out to the next ones, lazily, piece by
        # piece: no stage ever holds more than one piece of its input.
        if i == len(self._decoders):
            yield from pieces
            return
        for piece in pieces:
            yield from self._through(i + 1, self._decoders[i].feed(piece))


_DECODERS: dict[str, Callable[[], Decoder]] = {
    "gzip": lambda: _Zlib(gzip=True),
    "x-gzip": lambda: _Zlib(gzip=True),
    "deflate": lambda: _Zlib(gzip=False),
    "br": _Brotli,
}


def decoder_for(content_encodings: Sequence[str]) -> Decoder:
    """The decoder for a response's Content-Encoding values; BadResponse for an unsupported one."""
    codings = [c.strip().lower() for value in content_encodings for c in value.split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return _Identity()
    if len(codings) > MAX_CODINGS:
        raise BadResponse(f"Content-Encoding stacks {len(codings)} codings; at most {MAX_CODINGS} are read")
    unknown = [c for c in codings if c not in _DECODERS]
    if unknown:
        raise BadResponse(
            f"unsupported Content-Encoding {unknown[0][:40]!r} (the crawler asks for {ACCEPT_ENCODING})"
        )
    return _Chain([_DECODERS[c]() for c in reversed(codings)])


def decode_errors() -> tuple[type[Exception], ...]:
    """Exceptions a decoder raises on corrupt input."""
    return (zlib.error, brotli.error)
