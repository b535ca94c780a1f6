"""Simhash: near texts get near fingerprints, other texts far ones, every process the same bits."""

from __future__ import annotations

import random
import subprocess
import sys

from crawler.content.simhash import hamming, simhash

WORDS = [
    "river",
    "stone",
    "bread",
    "lamp",
    "garden",
    "winter",
    "engine",
    "silver",
    "paper",
    "orange",
    "market",
    "window",
    "cotton",
    "harbour",
    "violin",
    "ladder",
    "candle",
    "meadow",
    "copper",
    "forest",
    "pencil",
    "thunder",
    "marble",
    "island",
    "basket",
    "saddle",
    "canvas",
    "falcon",
    "pepper",
    "velvet",
    "anchor",
    "lantern",
    "mirror",
    "quartz",
    "tunnel",
    "walnut",
    "ember",
    "glacier",
    "orchard",
]


def text(seed: int, words: int = 400) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) + str(rng.randrange(50)) for _ in range(words))


def edited(original: str, edits: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = original.split()
    for _ in range(edits):
        words[rng.randrange(len(words))] = f"edit{rng.randrange(10**6)}"
    return " ".join(words)


def test_a_page_with_a_few_words_changed_is_within_three_bits() -> None:
    original = text(1, words=1500)
    for seed in range(20):
        fingerprint = simhash(edited(original, 3, seed))
        assert fingerprint is not None
        assert hamming(simhash(original) or 0, fingerprint) <= 3


def test_different_texts_are_far_apart() -> None:
    prints = [simhash(text(seed)) for seed in range(20)]
    distances = [hamming(a or 0, b or 0) for i, a in enumerate(prints) for b in prints[i + 1 :]]
    assert min(distances) > 10


def test_case_and_spacing_are_no_change() -> None:
    assert simhash("The  quick brown\nfox jumps") == simhash("the quick Brown fox JUMPS")
    assert simhash("") is None and simhash("  — ! ") is None
    assert simhash("one") is not None  # shorter than a shingle: one shingle of what there is


def test_every_process_gets_the_same_bits() -> None:
    # No per-process hash seed: another interpreter (another PYTHONHASHSEED) agrees.
    code = "import sys; from crawler.content.simhash import simhash; print(simhash(sys.argv[1]))"
    sample = text(7, 50)
    out = subprocess.run(
        [sys.executable, "-c", code, sample],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    assert int(out.stdout) == simhash(sample)
