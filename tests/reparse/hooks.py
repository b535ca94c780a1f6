"""Parse hooks for the reparse tests: a field and links no declarative field or `<a>` gives; a slow one."""

from __future__ import annotations

import asyncio

from crawler.parse.hooks import HookPage, Parsed


def hidden_links(page: HookPage) -> Parsed:
    """Each page's `data-next` attribute, as a link and a field."""
    found = page.tree.xpath("string(//@data-next)")
    return Parsed({"next": found or None}, [found] if found else [])


async def slow(page: HookPage) -> Parsed:
    """A hook that takes its time (2 ms a page): a reparse long enough to be stopped midway."""
    await asyncio.sleep(0.002)
    return Parsed({"slow": True})
