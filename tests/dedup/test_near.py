"""The near-duplicate index in Redis: finds a stored page within the distance, and only then; one
page of two claimed at once; its tables for each distance; keys under the caller's prefix."""

from __future__ import annotations

import asyncio
import random

import pytest
from redis.asyncio import Redis

from crawler.dedup.near import BITS, MAX_DISTANCE, NearIndex, blocks_for
from crawler.errors import ConfigError
from crawler.names import Names


def flipped(simhash: int, bits: list[int]) -> int:
    for bit in bits:
        simhash ^= 1 << bit
    return simhash


def spread(rng: random.Random, count: int) -> list[int]:
    """`count` distinct bit positions."""
    return rng.sample(range(BITS), count)


async def test_a_page_within_the_distance_is_found_and_one_past_it_is_not(redis: Redis, prefix: str) -> None:
    index = NearIndex(redis, Names(prefix))
    rng = random.Random(1)
    for trial in range(20):
        original = rng.getrandbits(64)
        assert await index.claim(original, f"https://a.test/{trial}") is None
        near = flipped(original, spread(rng, 3))
        match = await index.claim(near, f"https://mirror.test/{trial}")
        assert match is not None
        assert (match.page, match.simhash, match.distance) == (f"https://a.test/{trial}", original, 3)
        far = flipped(original, spread(rng, 4))
        assert await index.find(far) is None


async def test_the_nearest_page_is_named_and_a_page_is_never_its_own_duplicate(
    redis: Redis, prefix: str
) -> None:
    index = NearIndex(redis, Names(prefix))
    base = 0x0123_4567_89AB_CDEF
    await index.add(base, "https://a.test/one")
    await index.add(flipped(base, [0, 17]), "https://a.test/two")
    query = flipped(base, [0, 17, 40])  # 1 bit from two, 3 from one
    match = await index.find(query)
    assert match is not None and (match.page, match.distance) == ("https://a.test/two", 1)
    # The page asking is left out: the next nearest is another page.
    match = await index.find(query, page="https://a.test/two")
    assert match is not None and (match.page, match.distance) == ("https://a.test/one", 3)
    # A page fetched again, changed a little, is no duplicate of itself; its new simhash is filed too.
    changed = flipped(base, [0, 17, 60, 61, 62])  # 3 bits from its old simhash, 5 from one
    assert await index.claim(changed, "https://a.test/two") is None
    match = await index.find(flipped(changed, [5, 6, 7]))
    assert match is not None and match.page == "https://a.test/two"


async def test_of_two_near_duplicates_claimed_at_once_one_is_the_original(redis: Redis, prefix: str) -> None:
    index = NearIndex(redis, Names(prefix))
    rng = random.Random(2)
    originals = [rng.getrandbits(64) for _ in range(30)]
    pairs = [(s, flipped(s, spread(rng, 2))) for s in originals]
    claims = [
        index.claim(s, f"https://{side}.test/{i}")
        for i, pair in enumerate(pairs)
        for side, s in zip("ab", pair, strict=True)
    ]
    answers = await asyncio.gather(*claims)
    for i in range(len(pairs)):
        first, second = answers[2 * i], answers[2 * i + 1]
        assert (first is None) != (second is None), "exactly one of each pair is the original"
        match = first or second
        assert match is not None and match.page in (f"https://a.test/{i}", f"https://b.test/{i}")


async def test_remove_forgets_a_pages_simhash_and_only_its_own(redis: Redis, prefix: str) -> None:
    index = NearIndex(redis, Names(prefix))
    simhash = 0xFFFF_0000_FFFF_0000
    await index.add(simhash, "https://a.test/")
    assert not await index.remove(simhash, "https://other.test/")
    assert await index.find(simhash) is not None
    assert await index.remove(simhash, "https://a.test/")
    assert await index.find(simhash) is None
    assert [k async for k in redis.scan_iter(match=f"{prefix}:*")] == []


@pytest.mark.parametrize("distance", range(MAX_DISTANCE + 1))
async def test_each_distance_has_tables_of_its_own(redis: Redis, prefix: str, distance: int) -> None:
    blocks = blocks_for(distance)
    assert len(blocks) == distance + 1
    assert sum(b.width for b in blocks) == BITS
    index = NearIndex(redis, Names(prefix), distance)
    rng = random.Random(distance)
    stored = rng.getrandbits(64)
    await index.add(stored, "https://a.test/")
    for _ in range(10):
        within = flipped(stored, spread(rng, distance))
        match = await index.find(within)
        assert match is not None and match.distance == distance
        assert await index.find(flipped(stored, spread(rng, distance + 1))) is None
    for block in blocks:
        assert block.join(block.value(stored), block.rest(stored)) == stored
        assert block.rest(stored) < 2**53  # a Lua number holds it exactly
    keys = {k.decode() async for k in redis.scan_iter(match=f"{prefix}:*")}
    assert keys and all(k.startswith(f"{prefix}:near:{distance + 1}:") for k in keys)


def test_a_distance_out_of_range_says_what_is_allowed() -> None:
    with pytest.raises(ConfigError, match="0 to 4"):
        blocks_for(MAX_DISTANCE + 1)
    with pytest.raises(ConfigError):
        blocks_for(-1)


async def test_a_simhash_is_64_bits(redis: Redis, prefix: str) -> None:
    index = NearIndex(redis, Names(prefix))
    with pytest.raises(ValueError, match="64-bit"):
        await index.add(1 << 64, "https://a.test/")
    with pytest.raises(ValueError, match="64-bit"):
        await index.find(-1)
