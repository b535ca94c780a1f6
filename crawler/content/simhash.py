"""Charikar's simhash of a text: 64 bits that differ in few places for texts that differ in few words.

Features are the text's overlapping runs of SHINGLE_WORDS words (case-folded), each hashed to 64
bits (BLAKE2b of each distinct word, combined by rotation), counted as often as they occur; bit i of
the simhash is set when most features have bit i set. Every process of a fleet gets the same bits for
the same text (no per-process hash seed). Two pages are near-duplicates within a Hamming distance of
3 (Manku, Jain, Das Sarma, WWW 2007); crawler/dedup/near.py finds them across the fleet.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

BITS = 64
SHINGLE_WORDS = 2
_WORD = re.compile(r"\w+")


def _word_hashes(words: list[str]) -> np.ndarray:
    known: dict[str, int] = {}
    for word in words:
        if word not in known:
            known[word] = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
    return np.fromiter((known[w] for w in words), dtype=np.uint64, count=len(words))


def _rotate(values: np.ndarray, bits: int) -> np.ndarray:
    if bits == 0:
        return values
    return (values << np.uint64(bits)) | (values >> np.uint64(BITS - bits))


def simhash(text: str, shingle: int = SHINGLE_WORDS) -> int | None:
    """The 64-bit simhash of `text`; None if it has no words."""
    words = _WORD.findall(text.casefold())
    if not words:
        return None
    hashes = _word_hashes(words)
    width = min(shingle, len(words))
    count = len(words) - width + 1
    # A run's hash: its words' hashes, each rotated by its place in the run, XORed together.
    features = np.zeros(count, dtype=np.uint64)
    for place in range(width):
        features ^= _rotate(hashes[place : place + count], width - 1 - place)
    bits = np.unpackbits(features.astype("<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
    ones = bits.sum(axis=0, dtype=np.int64)
    majority = (2 * ones > count).astype(np.uint8)
    return int.from_bytes(np.packbits(majority, bitorder="little").tobytes(), "little")


def hamming(a: int, b: int) -> int:
    """How many of the 64 bits of `a` and `b` differ."""
    return (a ^ b).bit_count()
