"""OpenDocument files' text, title and page count, by odfpy: ODT (pages as its editor counted
them), ODS (its sheets), ODP (its slides). Each is a zip that crawler.content.documents.zips has
checked first."""

from __future__ import annotations

import io
from typing import Any

from odf import dc, draw, table, teletype
from odf import meta as odf_meta
from odf.namespaces import TEXTNS
from odf.opendocument import load

from crawler.content.documents.kinds import Kind
from crawler.content.documents.limits import DocumentLimits
from crawler.content.documents.text import TextSink, clean_title

# Paragraphs and headings hold a document's text; everything else is a container of them.
_TEXT_ELEMENTS = frozenset({(TEXTNS, "p"), (TEXTNS, "h")})

Read = tuple[str, str | None, int | None, bool]  # text, title, pages, truncated


def read_odf(body: bytes, kind: Kind, limits: DocumentLimits) -> Read:
    """An OpenDocument's paragraphs and headings in order, its title and its pages (sheets, slides)."""
    document = load(io.BytesIO(body))
    sink = TextSink(limits.max_chars)
    _walk(document.body, sink)
    titles = document.meta.getElementsByType(dc.Title)
    title = clean_title(teletype.extractText(titles[0])) if titles else None
    if kind is Kind.ODS:
        pages: int | None = len(document.spreadsheet.getElementsByType(table.Table))
    elif kind is Kind.ODP:
        pages = len(document.presentation.getElementsByType(draw.Page))
    else:
        pages = _saved_pages(document)
    return sink.text(), title, pages, sink.truncated


def _walk(node: Any, sink: TextSink) -> None:
    # Depth first, without recursion: a hostile file may nest elements deeper than Python's stack.
    stack = [node]
    while stack and not sink.full:
        element = stack.pop()
        if getattr(element, "qname", None) in _TEXT_ELEMENTS:
            sink.add(teletype.extractText(element))
            continue
        stack.extend(reversed(getattr(element, "childNodes", ())))


def _saved_pages(document: Any) -> int | None:
    for statistic in document.meta.getElementsByType(odf_meta.DocumentStatistic):
        count = str(statistic.getAttribute("pagecount") or "")
        if count.isdigit():
            return int(count)
    return None
