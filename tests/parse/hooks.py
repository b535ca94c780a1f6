"""Parse hooks the tests name in their domains.yaml (`parse: tests.parse.hooks:...`)."""

from __future__ import annotations

import asyncio
import threading
from datetime import date
from typing import Any

from crawler.parse.hooks import HookPage, Parsed

released = threading.Event()  # lets a test end the slow hook's thread once it has timed out


def fields_and_links(page: HookPage) -> Parsed:
    """Fields from the tree and the declarative data, links relative and absolute."""
    heading = page.tree.findtext(".//h1")
    return Parsed(
        fields={"heading": heading, "status": page.status, "seen_price": page.data.get("price")},
        links=["/from-hook", "https://elsewhere.test/x", "mailto:a@b.test"],
    )


def with_soup(page: HookPage) -> dict[str, Any]:
    """The BeautifulSoup object, built because this hook asks for it."""
    return {"links_in_soup": len(page.soup.find_all("a")), "when": date(2024, 3, 12)}


def plain_dict(page: HookPage) -> dict[str, Any]:
    return {"content_type": page.headers.get("content-type")}


def raises(page: HookPage) -> None:
    raise ValueError("cannot read postgresql://bot:hunter2@db.test/pages")


def slow(page: HookPage) -> None:
    released.wait(30)


async def slow_async(page: HookPage) -> None:
    await asyncio.sleep(30)


def wrong_type(page: HookPage) -> int:
    return 42


NOT_CALLABLE = 1
