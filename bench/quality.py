"""CPU per page of extraction with a domain's expectations checked and counted, against extraction
alone, on the bench site's pages (the ten typed fields of bench.extraction), interleaved in rounds.

python -m bench.quality [--pages 300] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.extraction import TEN_FIELDS
from bench.site import SiteSpec, _paragraphs, render
from crawler.config import FieldRule
from crawler.parse.extract import compile_fields, extract
from crawler.quality.checks import Expectations, expectation_names
from crawler.quality.expect import load_expect

DOMAIN = "127.0.0.31"
# Ten page expectations (nine of fields, one JSON Schema of the whole data), and a page rule with a
# fill rate, so the URL is matched as well.
EXPECT: dict[str, Any] = {
    "fields": {
        "name": {"present": True, "length": "<= 200"},
        "price": {"present": True, "type": "float", "range": "> 0, < 100000"},
        "currency": {"one_of": ["EUR", "USD", "GBP"]},
        "first_link": {"pattern": "^https?://"},
        "links": {"length": ">= 1"},
        "item_count": {"range": ">= 0"},
    },
    "schema": {
        "type": "object",
        "required": ["name", "price"],
        "properties": {"price": {"type": "number", "minimum": 0}, "links": {"type": "array"}},
    },
    "pages": [{"name": "product", "match": "^/p/", "fields": {"price": {"present": "95%"}}}],
}


def main() -> None:
    """Print CPU microseconds per page (median of rounds): extraction alone, with the expectations,
    and the expectations alone on data already extracted."""
    parser = argparse.ArgumentParser(prog="python -m bench.quality")
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    spec = SiteSpec(pages=args.pages)
    pool = _paragraphs(spec.seed)
    pages = [(spec.url(spec.hosts[0], i), render(spec, 0, i, pool).encode()) for i in range(args.pages)]
    fields = compile_fields({name: FieldRule.model_validate(rule) for name, rule in TEN_FIELDS.items()})
    expect = load_expect(EXPECT)
    plan = Expectations(expect, fields=fields)
    datas = [(url, extract(body, url, fields=fields).data) for url, body in pages]
    invalid = sum(not plan.check(url, data).ok for url, data in datas)

    def alone(url: str, body: bytes) -> Any:
        return extract(body, url, fields=fields)

    def checked(url: str, body: bytes) -> Any:
        data = extract(body, url, fields=fields).data
        return plan.check(url, data).counts(DOMAIN)

    cases: dict[str, tuple[Callable[[str, Any], Any], list[tuple[str, Any]]]] = {
        "extraction alone": (alone, pages),
        "extraction + expectations": (checked, pages),
        "expectations alone": (lambda url, data: plan.check(url, data).counts(DOMAIN), datas),
    }
    for run, inputs in cases.values():  # warm up: imports, caches
        run(*inputs[0])
    timings: dict[str, list[float]] = {name: [] for name in cases}
    clock = time.process_time
    for _ in range(args.rounds):
        spent = dict.fromkeys(cases, 0.0)
        # Page by page, each case in turn, in turns reversed from page to page: a noisy neighbour, a
        # CPU slowing down, or caches warmed by the case before, favour none.
        order = list(cases.items())
        for i in range(len(pages)):
            for name, (run, inputs) in order if i % 2 else reversed(order):
                started = clock()
                run(*inputs[i])
                spent[name] += clock() - started
        for name in cases:
            timings[name].append(spent[name] / len(pages) * 1e6)
    medians = {name: statistics.median(values) for name, values in timings.items()}
    names = len(expectation_names(expect))
    print(
        f"{len(pages)} bench pages of ~{spec.page_bytes // 1000} KB, {len(fields)} fields, {names} page "
        f"expectations + 1 fill rate ({invalid} pages invalid), CPU median of {args.rounds} rounds"
    )
    for name, values in timings.items():
        print(f"{name:<28} {medians[name]:7.1f} us/page  (min {min(values):.1f})")
    base = medians["extraction alone"]
    print(f"with expectations / alone: {medians['extraction + expectations'] / base:.3f}")
    print(f"expectations alone / extraction: {medians['expectations alone'] / base:.1%}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
