"""Content decoding a bounded piece at a time."""

from __future__ import annotations

import gzip
import random
import zlib

import brotli
import pytest

from crawler.errors import BadResponse
from crawler.fetch.decoding import PIECE, decoder_for

BODY = random.Random(0).randbytes(100_000) + bytes(300_000)


def _raw_deflate(data: bytes) -> bytes:
    squeeze = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return squeeze.compress(data) + squeeze.flush()


ENCODED = {
    "": BODY,
    "identity": BODY,
    "gzip": gzip.compress(BODY),
    "x-gzip": gzip.compress(BODY),
    "deflate": zlib.compress(BODY),
    "br": brotli.compress(BODY),
    "gzip, br": brotli.compress(gzip.compress(BODY)),
    "GZIP ,  Deflate": zlib.compress(gzip.compress(BODY)),
}


def decode(coding: str, data: bytes, step: int) -> list[bytes]:
    decoder = decoder_for([coding])
    pieces = [p for i in range(0, len(data), step) for p in decoder.feed(data[i : i + step])]
    return pieces + list(decoder.flush())


@pytest.mark.parametrize("step", [1, 3, 4096, 10**7])
@pytest.mark.parametrize("coding", sorted(ENCODED))
def test_decodes_in_pieces_of_any_input_size(coding: str, step: int) -> None:
    if step == 1 and len(ENCODED[coding]) > 50_000:
        step = 7  # byte by byte is just as tested on the small ones, faster
    pieces = decode(coding, ENCODED[coding], step)
    assert b"".join(pieces) == BODY
    assert max(map(len, pieces)) <= 2 * PIECE


@pytest.mark.parametrize("step", [1, 5, 10**6])
def test_gzip_members_and_trailing_bytes(step: int) -> None:
    data = gzip.compress(BODY[:1000]) + gzip.compress(BODY[1000:2000]) + b"trailing junk"
    assert b"".join(decode("gzip", data, step)) == BODY[:2000]


@pytest.mark.parametrize("step", [1, 2, 10**6])
def test_raw_deflate_sent_as_deflate(step: int) -> None:
    assert b"".join(decode("deflate", _raw_deflate(BODY[:5000]), step)) == BODY[:5000]


def test_a_bomb_comes_out_a_piece_at_a_time() -> None:
    bomb = gzip.compress(gzip.compress(bytes(200 * 2**20)))  # 200 MB in about 1 KB
    decoder = decoder_for(["gzip, gzip"])
    total = 0
    for piece in decoder.feed(bomb):
        assert len(piece) <= PIECE
        total += len(piece)
        if total > 10 * 2**20:
            break  # the reader stops here, and nothing more was inflated
    assert total <= 10 * 2**20 + PIECE


@pytest.mark.parametrize(
    ("codings", "message"),
    [
        (["zstd"], "unsupported Content-Encoding 'zstd'"),
        (["gzip, compress"], "unsupported Content-Encoding 'compress'"),
        (["gzip", "gzip", "gzip, gzip"], "stacks 4 codings"),
    ],
)
def test_unsupported_codings(codings: list[str], message: str) -> None:
    with pytest.raises(BadResponse, match=message):
        decoder_for(codings)
