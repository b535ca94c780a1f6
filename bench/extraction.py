"""Extraction cost per page on the bench site's pages: default (links + title), ten typed fields,
JSON-LD; and today's parser (`git show REV:crawler/parse/extract.py`) side by side, interleaved.

python -m bench.extraction [--pages 300] [--rounds 7] [--baseline REV]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.site import SiteSpec, _paragraphs, render
from crawler.config import FieldRule
from crawler.parse.extract import compile_fields, extract

JSON_LD = (
    b'<script type="application/ld+json">{"@context": "https://schema.org", "@type": "Product", '
    b'"name": "Lamp", "sku": "L-42", "offers": {"@type": "Offer", "price": "12.50", '
    b'"priceCurrency": "EUR"}}</script></head>'
)
TEN_FIELDS: dict[str, dict[str, Any]] = {
    "name": {"css": "h1", "required": True},
    "price": {"css": ".price", "type": "price", "required": True},
    "amount": {"css": ".price", "type": "float"},
    "currency": {"css": ".price", "regex": r"([A-Z]{3})"},
    "first_link": {"css": "ul.links a", "attr": "href"},
    "links": {"css": "ul.links a", "attr": "href", "all": True},
    "item_count": {"xpath": "count(//ul[@class='links']/li)", "type": "int"},
    "in_stock": {"css": ".stock", "type": "bool", "default": False},
    "released": {"css": "time", "type": "date"},
    "items": {
        "css": "ul.links li",
        "all": True,
        "fields": {"label": "a", "href": {"css": "a", "attr": "href"}},
    },
}


def _baseline(rev: str) -> Callable[..., Any] | None:
    try:
        source = subprocess.run(
            ["git", "show", f"{rev}:crawler/parse/extract.py"], capture_output=True, text=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "extract_baseline.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("extract_baseline", path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
    except ImportError:  # the baseline imports what no longer exists: no side-by-side figure
        return None
    return module.extract  # type: ignore[no-any-return]


def main() -> None:
    """Print microseconds per page (median of rounds) for each extraction setting."""
    parser = argparse.ArgumentParser(prog="python -m bench.extraction")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--baseline", default="main", help="git revision to compare the default path with")
    args = parser.parse_args()
    spec = SiteSpec(pages=args.pages)
    pool = _paragraphs(spec.seed)
    pages = [(spec.url(spec.hosts[0], i), render(spec, 0, i, pool).encode()) for i in range(args.pages)]
    with_ld = [(url, body.replace(b"</head>", JSON_LD, 1)) for url, body in pages]
    fields = compile_fields({name: FieldRule.model_validate(rule) for name, rule in TEN_FIELDS.items()})
    cases: dict[str, Callable[[str, bytes], Any]] = {}
    baseline = _baseline(args.baseline)
    if baseline is not None:
        cases[f"default ({args.baseline})"] = lambda url, body: baseline(body, url)
    cases["default (links + title)"] = lambda url, body: extract(body, url)
    cases["ten typed fields"] = lambda url, body: extract(body, url, fields=fields)
    cases["json-ld"] = lambda url, body: extract(body, url, structured=["json-ld"])
    inputs = {name: with_ld if name == "json-ld" else pages for name in cases}
    for name, run in cases.items():  # warm up: imports, caches
        run(*inputs[name][0])
    timings: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, run in cases.items():  # interleaved, so a noisy neighbour hits every case alike
            started = time.perf_counter()
            for url, body in inputs[name]:
                run(url, body)
            timings[name].append((time.perf_counter() - started) / len(pages) * 1e6)
    print(f"{len(pages)} bench pages of ~{spec.page_bytes // 1000} KB, median of {args.rounds} rounds")
    for name, values in timings.items():
        print(f"{name:<28} {statistics.median(values):7.0f} us/page  (min {min(values):.0f})")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
