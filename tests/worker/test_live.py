"""The live configuration compiles each listed domain's fields and expectations once, and one set
shared by every other host: a crawl of the open web does not grow a copy per host it meets."""

from __future__ import annotations

from crawler.config import parse_config
from crawler.worker.live import LiveConfig


def test_hosts_of_no_listed_domain_share_what_is_compiled_for_them() -> None:
    live = LiveConfig(
        parse_config(
            "defaults: {extract: {title: {css: h1}}}\n"
            "domains:\n"
            "  a.test: {extract: {price: {css: .price}}, expect: {fields: {price: {present: 0.9}}}}\n"
            "discover: {follow: all}\n"
        )
    )
    assert live.fields("h1.other.test") is live.fields("h2.other.test")
    assert live.expectations("h1.other.test") is live.expectations("h2.other.test")
    assert live.fields("a.test") is not live.fields("h1.other.test")
    assert set(live.fields("a.test")) != set(live.fields("h1.other.test"))
    assert live.expectations("a.test") is live.expectations("a.test")
