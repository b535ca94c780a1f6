"""The crawl message on the wire: versioned, strict about what it needs, tolerant of what it doesn't."""

from __future__ import annotations

import pytest

from crawler.archive import Archived
from crawler.errors import InvalidMessage
from crawler.frontier.message import MAX_MESSAGE_BYTES, CrawlMessage, Refresh, SitemapTask


def test_round_trip() -> None:
    message = CrawlMessage("http://a.test/x", depth=3, via=("00112233445566ff", "8899aabbccddeeff"))
    assert CrawlMessage.decode(message.encode()) == message


def test_a_refresh_carries_its_rows_validators_signature_interval_and_gone_count() -> None:
    modified = "Fri, 04 Dec 2026 12:00:00 GMT"
    refresh = Refresh('W/"x1"', modified, "ab" * 16, interval=5400.0, gone=1)
    message = CrawlMessage("http://a.test/p", depth=2, crawl="c1", refresh=refresh)
    assert CrawlMessage.decode(message.encode()) == message
    bare = CrawlMessage("http://a.test/", refresh=Refresh())
    assert CrawlMessage.decode(bare.encode()).refresh == Refresh()
    # Its stored answer in the WARC archive, which a 304 or the same payload is a revisit of.
    archived = Archived("crawler-1.warc.gz", 301, 740, "sha1:ABC", "2026-12-05T07:48:53.018608Z")
    kept = CrawlMessage("http://a.test/", refresh=Refresh(archived=archived))
    assert CrawlMessage.decode(kept.encode()).refresh == Refresh(archived=archived)


def test_a_sitemap_task_carries_its_round_depth_and_kind() -> None:
    for task in (SitemapTask("r1", find=True), SitemapTask("r1", 2), SitemapTask("r2", 0, counted=False)):
        message = CrawlMessage("http://a.test/sitemap.xml", crawl="c1", sitemap=task)
        assert CrawlMessage.decode(message.encode()) == message
    assert CrawlMessage.decode(b'{"v": 1, "url": "http://a.test/"}').sitemap is None


def test_fields_a_newer_worker_adds_are_ignored() -> None:
    body = b'{"v": 1, "url": "http://a.test/", "depth": 2, "priority_hint": 7, "trace": {"id": 1}}'
    assert CrawlMessage.decode(body) == CrawlMessage("http://a.test/", 2)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1]", "not a JSON object"),
        (b'{"url": "http://a.test/"}', "unknown message version 'None'"),
        (b'{"v": 2, "url": "http://a.test/"}', "unknown message version '2'"),
        (b'{"v": true, "url": "http://a.test/"}', "unknown message version"),
        (b'{"v": 1.0, "url": "http://a.test/"}', "unknown message version"),
        (b'{"v": "1", "url": "http://a.test/"}', "unknown message version"),
        (b'{"v": 1}', "'url' missing"),
        (b'{"v": 1, "url": 5}', "'url' missing"),
        (b'{"v": 1, "url": "http://a.test/", "depth": -1}', "'depth'"),
        (b'{"v": 1, "url": "http://a.test/", "depth": 1e3}', "'depth'"),
        (b'{"v": 1, "url": "http://a.test/", "depth": 10000000000}', "'depth'"),
        (b'{"v": 1, "url": "http://a.test/", "via": "00112233445566ff"}', "'via'"),
        (b'{"v": 1, "url": "http://a.test/", "via": [3]}', "'via'"),
        (b'{"v": 1, "url": "http://a.test/", "via": ["' + b"0" * 65 + b'"]}', "'via'"),
        (b'{"v": 1, "url": "http://a.test/", "via": [' + b",".join([b'"0"'] * 65) + b"]}", "'via'"),
        (b" " * (MAX_MESSAGE_BYTES + 1), "exceeds"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": [1]}', "'refresh' is not a JSON object"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": {"etag": 5}}', "'refresh.etag'"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": {"etag": "' + b"x" * 513 + b'"}}', "'refresh.etag'"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": {"interval": -1}}', "'refresh.interval'"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": {"interval": true}}', "'refresh.interval'"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": {"gone": "2"}}', "'refresh.gone'"),
        (b'{"v": 1, "url": "http://a.test/", "refresh": {"archived": ["f", 1, 2]}}', "'refresh.archived'"),
        (
            b'{"v": 1, "url": "http://a.test/", "refresh": {"archived": ["f", "1", 2, "sha1:X", "d"]}}',
            "'refresh.archived'",
        ),
        (b'{"v": 1, "url": "http://a.test/", "sitemap": 1}', "'sitemap' is not a JSON object"),
        (b'{"v": 1, "url": "http://a.test/", "sitemap": {}}', "'sitemap.round'"),
        (b'{"v": 1, "url": "http://a.test/", "sitemap": {"round": "a b"}}', "'sitemap.round'"),
        (b'{"v": 1, "url": "http://a.test/", "sitemap": {"round": "r", "depth": 17}}', "'sitemap.depth'"),
        (b'{"v": 1, "url": "http://a.test/", "sitemap": {"round": "r", "find": 1}}', "'sitemap.find'"),
    ],
)
def test_invalid_messages_say_what_is_wrong(body: bytes, why: str) -> None:
    with pytest.raises(InvalidMessage, match=why):
        CrawlMessage.decode(body)
