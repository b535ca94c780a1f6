"""Main-content extraction: F1 and milliseconds per page of each candidate library on ScrapingHub's
article-extraction-benchmark (181 news and blog pages with their article text as ground truth).

python -m bench.content DATASET [--only crawler,trafilatura,...] [--rounds 1] [--write-outputs DIR] [--pool N]

DATASET holds the benchmark's `ground-truth.json` and `html/*.html.gz` (its repository's data). F1 is
the benchmark's own measure (its evaluate.py), computed here the same way: texts cut into words (\\w+),
words into shingles of 4; per page, true positives, false positives and false negatives counted over
shingles and scaled to sum to 1; precision averaged over the pages that predicted anything, recall over
the pages whose truth has anything; F1 their harmonic mean. --write-outputs writes each candidate's
answers in the benchmark's output format, for its evaluate.py to check these figures.

Speed is one core, pages one after another in this process, each candidate after a warm-up page;
`ms/page` is wall time, `cpu ms/page` this process's CPU time. --pool N then sends every page's whole
job (main content, language, simhash) through a content pool of N processes, 2N at a time, and
reports pages/s. Nothing here touches the network.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING

from bench.compare import start

if TYPE_CHECKING:
    from crawler.content.main import Favor

_TOKEN = re.compile(r"\w+")
SHINGLE = 4

Extractor = Callable[[str], str | None]


# -- the benchmark's measure -------------------------------------------------------------------


def _shingles(text: str) -> Counter[tuple[str, ...]]:
    tokens = _TOKEN.findall(text or "")
    # A text shorter than a shingle is one shingle of what it has; an empty one has none.
    spans = (tuple(tokens[i : i + SHINGLE]) for i in range(max(1, len(tokens) - SHINGLE + 1)))
    return Counter(span for span in spans if span)


def page_counts(truth: str, predicted: str) -> tuple[float, float, float]:
    """(tp, fp, fn) over the shingles of one page, scaled to sum to 1 (so long pages weigh no more)."""
    expected, got = _shingles(truth), _shingles(predicted)
    tp = fp = fn = 0.0
    for key in expected.keys() | got.keys():
        want, have = expected.get(key, 0), got.get(key, 0)
        tp += min(want, have)
        fp += max(0, have - want)
        fn += max(0, want - have)
    total = tp + fp + fn
    return (tp / total, fp / total, fn / total) if total > 0 else (tp, fp, fn)


def _precision(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    return 0.0 if tp == fp == 0 else tp / (tp + fp)


def _recall(tp: float, fp: float, fn: float) -> float:
    if fp == fn == 0:
        return 1.0
    return 0.0 if tp == fn == 0 else tp / (tp + fn)


@dataclass(frozen=True, slots=True)
class Quality:
    f1: float
    precision: float
    recall: float
    exact: float  # share of pages whose words are exactly the truth's


def quality(truths: Mapping[str, str], predictions: Mapping[str, str]) -> Quality:
    """The benchmark's F1, precision, recall and accuracy of `predictions` against `truths`."""
    counts = [page_counts(truths[k], predictions.get(k, "")) for k in truths]
    precision = statistics.mean(_precision(*c) for c in counts if c[0] + c[1] > 0)
    recall = statistics.mean(_recall(*c) for c in counts if c[0] + c[2] > 0)
    f1 = 2 * precision * recall / (precision + recall)
    exact = statistics.mean(
        float(_TOKEN.findall(truths[k]) == _TOKEN.findall(predictions.get(k, ""))) for k in truths
    )
    return Quality(f1, precision, recall, exact)


# -- the candidates ------------------------------------------------------------------------------


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


def _crawler(favor: Favor = "precision", markdown: bool = False) -> Callable[[], Extractor]:
    def make() -> Extractor:
        from crawler.content.main import main_content

        def extract(html: str) -> str | None:
            found = main_content(html, favor=favor)
            if found is None:
                return None
            return found.markdown if markdown else found.text

        return extract

    return make


def _crawler_job() -> Extractor:
    from crawler.content.jobs import html_content

    def extract(html: str) -> str | None:
        found = html_content(html)
        return found.text if found else None

    return extract


def _trafilatura(fast: bool = False, favor_precision: bool = False) -> Callable[[], Extractor]:
    def make() -> Extractor:
        import trafilatura

        def extract(html: str) -> str | None:
            text: str | None = trafilatura.extract(
                html, include_comments=False, fast=fast, favor_precision=favor_precision
            )
            return text

        return extract

    return make


def _resiliparse() -> Extractor:
    from resiliparse.extract.html2text import extract_plain_text

    def extract(html: str) -> str | None:
        text: str = extract_plain_text(
            html,
            main_content=True,
            preserve_formatting=True,
            comments=False,
            post_meta=False,
            alt_texts=False,
            list_bullets=False,
        )
        return text

    return extract


def _readability() -> Extractor:
    import html_text
    from readability import Document

    def extract(html: str) -> str | None:
        text: str = html_text.extract_text(Document(html).summary(html_partial=True))
        return text

    return extract


def _newspaper() -> Extractor:
    import newspaper

    config = newspaper.Config()
    config.fetch_images = False  # else it downloads each page's images to size them
    config.follow_meta_refresh = False

    def extract(html: str) -> str | None:
        article = newspaper.Article("https://example.invalid/", config=config)
        article.download(input_html=html)
        article.parse()
        text: str = article.text
        return text

    return extract


@dataclass(frozen=True, slots=True)
class Candidate:
    name: str
    dist: str  # the distribution whose version to show
    make: Callable[[], Extractor]
    note: str = ""


CANDIDATES = {
    c.name: c
    for c in (
        Candidate(
            "crawler",
            "trafilatura",
            _crawler(),
            "crawler.content.main_content(): its .text (favor='precision')",
        ),
        Candidate("crawler-balanced", "trafilatura", _crawler("balanced"), "main_content(favor='balanced')"),
        Candidate("crawler-job", "trafilatura", _crawler_job, "jobs.html_content(): + language, simhash"),
        Candidate(
            "crawler-markdown",
            "trafilatura",
            _crawler(markdown=True),
            "its .markdown: link targets count as extra words",
        ),
        Candidate("trafilatura", "trafilatura", _trafilatura(), "extract(), as the benchmark runs it"),
        Candidate("trafilatura-fast", "trafilatura", _trafilatura(fast=True), "extract(fast=True)"),
        Candidate(
            "trafilatura-precision", "trafilatura", _trafilatura(favor_precision=True), "favor_precision"
        ),
        Candidate("resiliparse", "resiliparse", _resiliparse, "main_content=True, its best options here"),
        Candidate("readability-lxml", "readability-lxml", _readability, "with html-text, as the benchmark"),
        Candidate("newspaper4k", "newspaper4k", _newspaper, "no image fetching"),
    )
}


def load_dataset(root: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(page id -> HTML, page id -> the truth's article text)."""
    truth = json.loads((root / "ground-truth.json").read_text(encoding="utf-8"))
    pages = {}
    for path in sorted((root / "html").glob("*.html.gz")):
        pages[path.name.split(".")[0]] = gzip.decompress(path.read_bytes()).decode("utf-8")
    if set(pages) != set(truth):
        sys.exit(f"{root}: html/ and ground-truth.json name different pages")
    return pages, {k: v.get("articleBody", "") or "" for k, v in truth.items()}


@dataclass(frozen=True, slots=True)
class Run:
    outputs: dict[str, str]
    ms: float
    cpu_ms: float
    failures: int


def run(extract: Extractor, pages: Mapping[str, str], rounds: int) -> Run:
    """Each page through `extract`, `rounds` times: the fastest round's time, the first's answers."""
    extract(next(iter(pages.values())))  # warm-up: lazy imports, caches
    outputs: dict[str, str] = {}
    failures = 0
    best = best_cpu = float("inf")
    for round_ in range(rounds):
        started, started_cpu = time.perf_counter(), time.process_time()
        for key, html in pages.items():
            try:
                text = extract(html) or ""
            except Exception:
                text = ""
                failures += round_ == 0
            if round_ == 0:
                outputs[key] = text
        best = min(best, time.perf_counter() - started)
        best_cpu = min(best_cpu, time.process_time() - started_cpu)
    return Run(outputs, best / len(pages) * 1000, best_cpu / len(pages) * 1000, failures)


async def through_pool(pages: Mapping[str, str], processes: int) -> tuple[float, int]:
    """(pages/s, pages with content) of jobs.html_content over every page, through a content pool of
    `processes`, with twice as many jobs in flight (a worker's many pages at once)."""
    from crawler.content.jobs import html_content
    from crawler.content.pool import ContentPool, PoolLimits

    async with ContentPool(PoolLimits(processes=processes)) as pool:
        queue = list(pages.values())
        found = 0

        async def feed() -> None:
            nonlocal found
            while queue:
                html = queue.pop()
                content = await pool.run(html_content, html)
                found += content is not None

        started = time.perf_counter()
        await asyncio.gather(*(feed() for _ in range(2 * processes)))
        return len(pages) / (time.perf_counter() - started), found


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", type=Path, help="folder with ground-truth.json and html/*.html.gz")
    parser.add_argument("--rounds", type=int, default=1, help="time each candidate this many times")
    parser.add_argument("--write-outputs", type=Path, help="write output/<candidate>.json for evaluate.py")
    parser.add_argument("--pool", type=int, default=0, help="then every page through a content pool of N")
    args, names = start(parser, argv, CANDIDATES)
    pages, truths = load_dataset(args.dataset)
    print(f"{len(pages)} pages of {args.dataset}; F1 as the benchmark's evaluate.py computes it")
    print(
        f"{'candidate':<22} {'version':<9} {'F1':>6} {'precision':>9} {'recall':>7} {'exact':>6} "
        f"{'ms/page':>8} {'cpu ms/page':>11} {'failed':>6}  note"
    )
    for name in names:
        candidate = CANDIDATES[name]
        try:
            extract = candidate.make()
        except ImportError as e:
            print(f"{name:<22} not installed ({e}): pip install -e '.[bench]'")
            continue
        result = run(extract, pages, args.rounds)
        q = quality(truths, result.outputs)
        print(
            f"{name:<22} {_version(candidate.dist):<9} {q.f1:>6.4f} {q.precision:>9.4f} {q.recall:>7.4f} "
            f"{q.exact:>6.3f} {result.ms:>8.1f} {result.cpu_ms:>11.1f} {result.failures:>6}  "
            f"{candidate.note}",
            flush=True,
        )
        if args.write_outputs:
            args.write_outputs.mkdir(parents=True, exist_ok=True)
            answers = {k: {"articleBody": v} for k, v in result.outputs.items()}
            document = {"version": _version(candidate.dist), "output": answers}
            (args.write_outputs / f"{name}.json").write_text(json.dumps(document, ensure_ascii=False))
    if args.pool:
        rate, found = asyncio.run(through_pool(pages, args.pool))
        print(
            f"jobs.html_content through a content pool of {args.pool}: {rate:.1f} pages/s "
            f"({found} with content)"
        )


if __name__ == "__main__":
    main()
