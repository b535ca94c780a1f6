"""Crawls through the service layer: created with their seeds queued, listed and paged, cancelled with
their counts kept, deleted."""

from __future__ import annotations

import pytest

from crawler.errors import BadURL, NotFound
from crawler.service import Control, NewCrawl
from crawler.service.crawls import check_crawl


async def test_a_crawl_is_created_shown_listed_cancelled_and_deleted(control: Control) -> None:
    crawls = control.crawls
    made = await crawls.create(NewCrawl(["http://a.test/"], label="one"))
    assert made.state == "running" and made.label == "one"
    assert made.seeds == ["http://a.test/"]
    assert made.counts["a.test"]["pending"] == 1
    assert (await crawls.get(made.id)).id == made.id
    other = await crawls.create(NewCrawl(["http://b.test/"], max_pages=5))
    assert other.options["max_pages"] == 5
    assert [v.id for v in await crawls.listed()] == [other.id, made.id]
    first = await crawls.page(limit=1)
    assert [v.id for v in first.crawls] == [other.id] and first.before == other.id
    rest = await crawls.page(limit=1, before=first.before)
    assert [v.id for v in rest.crawls] == [made.id] and rest.before is None
    cancelled = await crawls.cancel(made.id)
    assert cancelled.state == "cancelled" and cancelled.finished is not None
    assert [v.id for v in await crawls.listed("cancelled")] == [made.id]
    assert (await crawls.series(made.id)).crawl == made.id
    await crawls.delete(made.id)
    with pytest.raises(NotFound, match="no crawl"):
        await crawls.get(made.id)


async def test_a_crawl_is_refused_before_anything_is_recorded(control: Control) -> None:
    with pytest.raises(BadURL, match="at least one seed"):
        await control.crawls.create(NewCrawl([]))
    with pytest.raises(BadURL, match="not in the crawl's domains"):
        check_crawl(control.config, NewCrawl(["http://b.test/"], domains=["a.test"]))
    assert await control.crawls.listed() == []
    with pytest.raises(NotFound, match="no crawl yet"):
        await control.crawls.quality()
