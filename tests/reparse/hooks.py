"""A parse hook for the reparse tests: a field and links no declarative field or `<a>` gives."""

from __future__ import annotations

from crawler.parse.hooks import HookPage, Parsed


def hidden_links(page: HookPage) -> Parsed:
    """Each page's `data-next` attribute, as a link and a field."""
    found = page.tree.xpath("string(//@data-next)")
    return Parsed({"next": found or None}, [found] if found else [])
