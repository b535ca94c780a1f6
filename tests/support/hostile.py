"""What a hostile web server sends: compression bombs, trickling bodies, lying pages."""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from functools import cache

import brotli

from demo.site import Stream

SEGMENT = 10 * 2**20  # zeros per compressed segment


@cache
def _zlib_segments(wbits: int) -> tuple[bytes, bytes]:
    # After a full flush the compressor starts afresh, so every later segment of zeros compresses
    # to the same bytes: one is computed, and repeated as often as the bomb needs.
    deflate = zlib.compressobj(9, zlib.DEFLATED, wbits)
    first = deflate.compress(bytes(SEGMENT)) + deflate.flush(zlib.Z_FULL_FLUSH)
    again = deflate.compress(bytes(SEGMENT)) + deflate.flush(zlib.Z_FULL_FLUSH)
    return first, again


@cache
def _brotli_segments() -> tuple[bytes, bytes]:
    # Once the window is all zeros, any back-reference yields zeros: a flushed segment repeats.
    squeeze = brotli.Compressor(quality=5)
    first = squeeze.process(bytes(SEGMENT)) + squeeze.flush()
    again = squeeze.process(bytes(SEGMENT)) + squeeze.flush()
    return first, again


def _repeat(first: bytes, again: bytes, inflated: int) -> Iterator[bytes]:
    yield first
    for _ in range(inflated // SEGMENT - 1):
        yield again


def gzip_bomb(inflated: int) -> Stream:
    """A gzip stream of `inflated` zero bytes (about 1 KB on the wire per MB inflated)."""
    segments = _zlib_segments(16 + zlib.MAX_WBITS)
    return lambda: _repeat(*segments, inflated)


def deflate_bomb(inflated: int) -> Stream:
    """A zlib-wrapped deflate stream of `inflated` zero bytes."""
    segments = _zlib_segments(zlib.MAX_WBITS)
    return lambda: _repeat(*segments, inflated)


def brotli_bomb(inflated: int) -> Stream:
    """A brotli stream of `inflated` zero bytes (a few bytes on the wire per 10 MB)."""
    segments = _brotli_segments()
    return lambda: _repeat(*segments, inflated)


def double_gzip_bomb(inflated: int) -> Stream:
    """gzip of a gzip bomb (Content-Encoding: gzip, gzip): one step of naive inflating is gigabytes."""

    inner = gzip_bomb(inflated)

    def stream() -> Iterator[bytes]:
        outer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        for piece in inner():
            yield outer.compress(piece)
        yield outer.flush()

    return stream


def trickle(size: int, interval: float) -> Stream:
    """`size` bytes of HTML, one every `interval` seconds."""

    def stream() -> Iterator[bytes]:
        for _ in range(size):
            yield b" "
            time.sleep(interval)

    return stream
