"""The language a text is written in, from py3langid's model (shipped in its package: nothing is
downloaded). Chosen by measurement on the UDHR in 49 languages: bench/language.py, docs/content.md."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from py3langid.langid import MODEL_FILE, LanguageIdentifier

# py3langid reads a text in one pass, in time linear in its length; past a few thousand characters
# the answer no longer changes, only its cost. The middle of a text, not its start: a page's first
# lines are the likeliest to be a caption, a date line or a quote in another language.
SAMPLE_CHARS = 4000
_LETTER = re.compile(r"[^\W\d_]")
MIN_LETTERS = 3  # fewer letters than this (digits, symbols, a name) say nothing of a language
# Codes py3langid answers for a text in no language.
_NONE = frozenset({"zxx", "und"})


@dataclass(frozen=True, slots=True)
class Language:
    """An ISO 639-1 code where the language has one (else its ISO 639-3 code), and the model's
    probability for it (0..1)."""

    code: str
    confidence: float


@cache
def _identifier() -> Any:
    return LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)


def load() -> None:
    """Load the model now (about a second), not on the first text: a pool's process calls this."""
    _identifier()


def _sample(text: str) -> str:
    if len(text) <= SAMPLE_CHARS:
        return text
    start = (len(text) - SAMPLE_CHARS) // 2
    return text[start : start + SAMPLE_CHARS]


def detect_language(text: str) -> Language | None:
    """The language of `text`; None if it has too few letters to tell."""
    if not _has_letters(text):
        return None
    code, confidence = _identifier().classify(_sample(text))
    if code in _NONE:
        return None
    return Language(code=str(code), confidence=round(float(confidence), 4))


def _has_letters(text: str) -> bool:
    """At least MIN_LETTERS letters, found without reading the whole of a long text."""
    return len(list(itertools.islice(_LETTER.finditer(text), MIN_LETTERS))) == MIN_LETTERS


def languages() -> frozenset[str]:
    """Every code detect_language may answer."""
    return frozenset(str(code) for code in _identifier().labels if code not in _NONE)
