"""bench.content scores as the article-extraction-benchmark's evaluate.py does: shingles of 4 words,
each page's counts scaled to 1, precision and recall averaged over pages, F1 of the averages."""

from __future__ import annotations

import pytest

from bench.content import page_counts, quality


def test_a_page_counts_its_shingles_scaled_to_one() -> None:
    # Truth: (a b c d), (b c d e); answer: (a b c d). One found, none extra, one missed.
    assert page_counts("a b c d e", "a b c d") == (0.5, 0.0, 0.5)
    assert page_counts("a b c d", "a b c d") == (1.0, 0.0, 0.0)
    assert page_counts("a b c d", "") == (0.0, 0.0, 1.0)
    # Words are runs of \\w: punctuation and case are kept apart as the benchmark keeps them.
    assert page_counts("Hello, world. It is", "hello world it is") == (0.0, 0.5, 0.5)
    # A text shorter than a shingle is one shingle of what it has.
    assert page_counts("a b", "a b") == (1.0, 0.0, 0.0)


def test_f1_is_of_the_averages_over_pages_that_count() -> None:
    truths = {"p1": "a b c d e", "p2": "f g h i", "p3": "j k l m"}
    answers = {"p1": "a b c d", "p2": "f g h i", "p3": ""}
    q = quality(truths, answers)
    # Precision over p1 and p2 (p3 predicted nothing): (1 + 1) / 2; recall over all three: (0.5 + 1 + 0) / 3.
    assert q.precision == pytest.approx(1.0)
    assert q.recall == pytest.approx(0.5)
    assert q.f1 == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert q.exact == pytest.approx(1 / 3)
