"""The language of a text, from a model shipped in its package."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.content.language import SAMPLE_CHARS, detect_language, languages

# Article 1 of the Universal Declaration of Human Rights, one language a line.
TEXTS = dict(
    line.split("\t", 1)
    for line in (Path(__file__).parent / "pages" / "udhr-article-1.tsv")
    .read_text(encoding="utf-8")
    .splitlines()
    if line and not line.startswith("#")
)


@pytest.mark.parametrize("code", sorted(TEXTS))
def test_the_language_of_a_text(code: str) -> None:
    found = detect_language(TEXTS[code])
    assert found is not None
    assert found.code == code
    assert 0.5 < found.confidence <= 1.0


def test_a_text_without_letters_has_no_language() -> None:
    assert detect_language("") is None
    assert detect_language("12:45 — 3.99 € / 2024-03-01 !!") is None


def test_a_long_text_is_read_from_its_middle() -> None:
    # A long German text after a long English preamble: the sample is its middle, German.
    text = TEXTS["en"] * 60 + TEXTS["de"] * 200 + TEXTS["en"] * 60
    assert len(text) > 3 * SAMPLE_CHARS
    found = detect_language(text)
    assert found is not None and found.code == "de"


def test_every_answer_is_a_language_code() -> None:
    codes = languages()
    assert {"en", "fr", "de", "zh", "ja"} <= codes
    assert all(2 <= len(code) <= 3 and code.isalpha() for code in codes)
