"""Structured data a page already carries: JSON-LD and microdata via extruct, OpenGraph via lxml.

extruct's extractors run on the tree the parser already built: no second parse of the page. Its
OpenGraph extractor needs lxml.html's element classes, which the parser does not build (they cost
time on every page), and OpenGraph is a handful of <meta> tags, so that one is ours.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

from lxml import etree


def extract_structured(root: etree._Element, base: str, syntaxes: Sequence[str]) -> dict[str, Any]:
    """Per syntax asked for, what the page carries (a list of items; a dict for OpenGraph)."""
    out: dict[str, Any] = {}
    for syntax in syntaxes:
        try:
            out[syntax] = _extractor(syntax)(root, base)
        except Exception:  # a page's malformed markup must not fail the page: extruct raises many kinds
            out[syntax] = None
    return out


_OG_PREFIXES = ("og:", "product:", "article:", "book:", "profile:", "music:", "video:")
_OG_META = etree.XPath("//head//meta[@property and @content]")


def _opengraph(root: etree._Element, base: str) -> dict[str, str]:
    # One dict of properties, the first value of each (og:image may repeat; the first is the main one).
    out: dict[str, str] = {}
    for meta in _OG_META(root):
        prop, content = str(meta.get("property", "")), str(meta.get("content", ""))
        if prop.startswith(_OG_PREFIXES):
            out.setdefault(prop, content.strip())
    return out


@cache
def _extractor(syntax: str) -> Callable[[etree._Element, str], Any]:
    # Imported on first use: extruct brings rdflib and more, which a crawl without `structured` never needs.
    if syntax == "json-ld":
        from extruct.jsonld import JsonLdExtractor

        jsonld = JsonLdExtractor()
        return lambda root, base: jsonld.extract_items(root, base_url=base)
    if syntax == "opengraph":
        return _opengraph
    if syntax == "microdata":
        from extruct.w3cmicrodata import MicrodataExtractor

        microdata = MicrodataExtractor()
        return lambda root, base: microdata.extract_items(root, base_url=base)
    raise ValueError(f"unknown structured data syntax {syntax!r}")
