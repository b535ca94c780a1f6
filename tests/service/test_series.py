"""A crawl's pages over time, from the spans its series keeps, into the chart's steps."""

from __future__ import annotations

from crawler.frontier.crawls import Span
from crawler.service.crawls import spread


def test_a_span_is_cut_to_the_crawls_life_and_shared_among_the_steps_it_overlaps() -> None:
    start = 1000.0
    spans = [
        Span("a.test", 995, 10, 4),  # began before the crawl: all 4 fall in its first 5 seconds
        Span("a.test", 1010, 60, 6),  # a coarse span: 10 of its 60 s in each of six 10-s steps
        Span("b.test", 2000, 10, 3),  # after the last step (clocks apart): the last step takes them
    ]
    found = spread(spans, start, 10, 7)
    assert found["a.test"] == [4.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert found["b.test"] == [0, 0, 0, 0, 0, 0, 3.0]
    assert sum(found["a.test"]) == 10


def test_coarse_steps_of_an_old_crawl_add_up_whatever_the_chart_step() -> None:
    spans = [Span("a.test", 3600 * h, 3600, 360) for h in range(48)]
    found = spread(spans, 0, 1440, 120)["a.test"]
    assert round(sum(found), 6) == 48 * 360
    assert max(found) == min(found) == 144.0  # a steady rate stays steady
