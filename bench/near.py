"""Near-duplicates: precision and recall of simhash + the Redis index on a generated set with known
pairs, at each distance and shingle size; and the index's lookups per second and bytes per page.

python -m bench.near [--pages 1000] [--distinct 2000] [--shingles 1,2,3] [--fill 200000] [--lookups 5000]

The set (seeded: the same every run): a site of --pages pages, served twice, the second copy with
small edits: its name in place of the first site's and another date line (half the pages), and also
one or two words changed and a share line more (the other half); --distinct other pages; and as many
pages that take half their paragraphs from a page of the site (related, not duplicates). Text is
made of sentences of words drawn from a Zipf-distributed vocabulary, 200 to 1,500 words a page. Each
page is claimed in a random order (crawler.dedup.near.NearIndex.claim, as a worker will): a page of
a pair whose other copy was claimed before it should find it (recall, also by kind of edit); any
page it finds must be its pair (precision; "wrong" counts the others).

Speed: an index filled with --fill random simhashes, then --lookups `find` calls one
after another and 32 at a time; bytes per page are Redis' MEMORY USAGE of the index's keys.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from redis.asyncio import Redis

from bench import services
from crawler.content.simhash import simhash
from crawler.dedup.near import NearIndex
from crawler.names import Names

SEED = 46


@dataclass(frozen=True, slots=True)
class Page:
    url: str
    text: str
    group: str | None  # pages of one group are duplicates of each other


class Writer:
    """Generated prose: sentences of Zipf-distributed words."""

    def __init__(self, rng: random.Random, vocabulary: int = 6000) -> None:
        self.rng = rng
        syllables = ["ka", "lo", "mi", "ter", "san", "do", "ri", "vel", "an", "os", "pre", "tu", "mar", "en"]
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(rng.choice(syllables) for _ in range(rng.randint(1, 4))))
        self.words = sorted(words)
        self.weights = [1 / (rank + 1) for rank in range(vocabulary)]

    def sentence(self) -> str:
        words = self.rng.choices(self.words, self.weights, k=self.rng.randint(6, 24))
        return " ".join(words).capitalize() + "."

    def paragraph(self) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(2, 6)))

    def page(self) -> list[str]:
        paragraphs: list[str] = []
        target = self.rng.randint(200, 1500)
        while sum(len(p.split()) for p in paragraphs) < target:
            paragraphs.append(self.paragraph())
        return paragraphs


def mirror(paragraphs: list[str], rng: random.Random, light: bool) -> list[str]:
    """The mirror's copy: its site's name and another date; unless `light`, also a word or two changed
    and a share line more."""
    copy = [p.replace("Kettle Gazette", "Kettle Mirror") for p in paragraphs]
    copy[0] = f"Published {rng.randint(2, 28)} March 2024 by the Kettle Mirror. {copy[0].split('. ', 1)[-1]}"
    if light:
        return copy
    for _ in range(rng.randint(1, 2)):
        at = rng.randrange(len(copy))
        words = copy[at].split()
        words[rng.randrange(len(words))] = "changed"
        copy[at] = " ".join(words)
    return [*copy, "Share this article with a friend."]


def make_set(pages: int, distinct: int) -> list[Page]:
    rng = random.Random(SEED)
    writer = Writer(rng)
    made: list[Page] = []
    site = []
    for i in range(pages):
        paragraphs = [f"Published 1 March 2024 by the Kettle Gazette. {writer.sentence()}", *writer.page()]
        site.append(paragraphs)
        made.append(
            Page(
                f"https://gazette.test/{i}", "\n".join(paragraphs), f"{'light' if i % 2 == 0 else 'more'}{i}"
            )
        )
        light = i % 2 == 0
        copy = "\n".join(mirror(paragraphs, rng, light))
        made.append(Page(f"https://mirror.test/{i}", copy, f"{'light' if light else 'more'}{i}"))
    for i in range(distinct):
        made.append(Page(f"https://other.test/{i}", "\n".join(writer.page()), None))
    for i in range(pages):
        source = site[i]
        half = [p for j, p in enumerate(source) if j % 2 == 0]
        related = half + writer.page()[: max(1, len(source) - len(half))]
        made.append(Page(f"https://related.test/{i}", "\n".join(related), None))
    rng.shuffle(made)
    return made


@dataclass(frozen=True, slots=True)
class Scored:
    shingle: int
    distance: int
    found: Counter[str]  # pairs found, by kind of edit
    pairs: Counter[str]  # pairs whose other copy was claimed first, by kind of edit
    wrong: int  # pages found near a page that is not their pair


async def score(
    redis: Redis, prefix: str, made: Sequence[Page], prints: Sequence[int], shingle: int, distance: int
) -> Scored:
    """Claim every page in order into a fresh index; count what it found against the truth."""
    index = NearIndex(redis, Names(f"{prefix}:s{shingle}"), distance)
    claimed: set[str] = set()
    found: Counter[str] = Counter()
    pairs: Counter[str] = Counter()
    wrong = 0
    group_of = {p.url: p.group for p in made}
    for page, fingerprint in zip(made, prints, strict=True):
        kind = (page.group or "").rstrip("0123456789")
        if page.group in claimed:
            pairs[kind] += 1
        match = await index.claim(fingerprint, page.url)
        if match is not None:
            if page.group is not None and group_of.get(match.page or "") == page.group:
                found[kind] += 1
            else:
                wrong += 1
        if page.group is not None:
            claimed.add(page.group)
    return Scored(shingle, distance, found, pairs, wrong)


async def speed(redis: Redis, prefix: str, fill: int, lookups: int) -> tuple[float, float, float]:
    """(lookups/s one at a time, lookups/s 32 at a time, index bytes per stored page)."""
    index = NearIndex(redis, Names(f"{prefix}:speed"))
    rng = random.Random(SEED)
    for start in range(0, fill, 100):
        await asyncio.gather(
            *(index.add(rng.getrandbits(64), f"p{n}") for n in range(start, min(fill, start + 100)))
        )
    queries = [rng.getrandbits(64) for _ in range(lookups)]
    started = time.perf_counter()
    for q in queries:
        await index.find(q)
    one = lookups / (time.perf_counter() - started)
    started = time.perf_counter()
    for at in range(0, lookups, 32):
        await asyncio.gather(*(index.find(q) for q in queries[at : at + 32]))
    many = lookups / (time.perf_counter() - started)
    used = 0
    async for key in redis.scan_iter(match=f"{prefix}:speed:*", count=1000):
        used += await redis.memory_usage(key) or 0
    return one, many, used / max(fill, 1)


async def measure(args: argparse.Namespace) -> None:
    made = make_set(args.pages, args.distinct)
    words = sorted(len(p.text.split()) for p in made)
    print(
        f"{len(made)} pages: {args.pages} pairs (site and mirror), {args.distinct} distinct, {args.pages} "
        f"sharing half a site page's paragraphs; {words[len(words) // 2]} words a page (median)"
    )
    redis = Redis.from_url(services.REDIS_URL)
    try:
        with services.key_prefix("near-bench-") as prefix:
            print(
                f"{'shingle':>7} {'distance':>8} {'precision':>9} {'recall':>7} "
                f"{'recall, name and date':>21} {'recall, and words':>17} {'wrong':>6}"
            )
            for shingle in args.shingles:
                prints = [simhash(page.text, shingle) or 0 for page in made]
                for distance in range(0, 5):
                    s = await score(redis, f"{prefix}:d{distance}", made, prints, shingle, distance)
                    found, pairs = sum(s.found.values()), sum(s.pairs.values())
                    precision = found / (found + s.wrong) if found + s.wrong else 1.0
                    print(
                        f"{s.shingle:>7} {s.distance:>8} {precision:>9.4f} {found / pairs:>7.4f} "
                        f"{s.found['light'] / s.pairs['light']:>21.4f} "
                        f"{s.found['more'] / s.pairs['more']:>17.4f} "
                        f"{s.wrong:>6}",
                        flush=True,
                    )
            one, many, per_page = await speed(redis, prefix, args.fill, args.lookups)
            print(
                f"index of {args.fill:,} simhashes at distance 3: {one:,.0f} lookups/s one at a time, "
                f"{many:,.0f} lookups/s 32 at a time, {per_page:.0f} bytes per stored page"
            )
    finally:
        await redis.aclose()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000, help="pages of the site served twice")
    parser.add_argument("--distinct", type=int, default=2000, help="other pages")
    parser.add_argument("--shingles", default="1,2,3", help="shingle sizes (words) to compare")
    parser.add_argument("--fill", type=int, default=200_000, help="simhashes in the index timed")
    parser.add_argument("--lookups", type=int, default=5000)
    args = parser.parse_args(argv)
    args.shingles = [int(s) for s in args.shingles.split(",")]
    asyncio.run(measure(args))


if __name__ == "__main__":
    main()
