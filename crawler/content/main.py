"""A page's main content without its menus, footers and banners: as Markdown and as plain text.

trafilatura finds the content (chosen by measurement: bench/content.py, docs/content.md). One
extraction gives both forms: its tree is rendered once as Markdown (headings, lists, tables, links,
code blocks, emphasis) and once as text, with link targets left out. CPU-heavy (tens of ms a page):
run it in a ContentPool, off the event loop.
"""

from __future__ import annotations

import copy
import logging
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import trafilatura
from lxml import etree

_render: Callable[[Any, bool], str] | None
try:  # trafilatura's own renderer of its tree; its module is not in the package's __all__
    from trafilatura.xml import xmltotxt as _render
except ImportError:  # pragma: no cover - guarded by tests/content/test_main.py
    _render = None

# trafilatura says "discarding data" at WARNING for every page it finds no content in: not news.
logging.getLogger("trafilatura").setLevel(logging.ERROR)

# What the extraction keeps: tables, links and formatting, for the Markdown; no comments (reader
# comments are not the page's content, and the benchmark's ground truth leaves them out), no images.
_OPTIONS: dict[str, Any] = {
    "include_comments": False,
    "include_tables": True,
    "include_images": False,
    "include_formatting": True,
    "include_links": True,
    "with_metadata": False,
}


Favor = Literal["balanced", "precision", "recall"]


@dataclass(frozen=True, slots=True)
class MainContent:
    """The main content of a page: `markdown` with its structure and links, `text` without either."""

    markdown: str
    text: str


def main_content(html: str | bytes, url: str | None = None, favor: Favor = "precision") -> MainContent | None:
    """The main content of `html` (relative links resolved against `url`); None if it has none.

    Pass text decoded as the page's charset says; bytes are decoded by trafilatura's own guess.
    `favor`: "precision" (the default) leaves out more of what may be boilerplate, "recall" keeps
    more of what may be content; on the article-extraction-benchmark precision scores the best F1, at
    about the same CPU (bench/content.py, docs/content.md).
    """
    if not html:
        return None
    precision, recall = favor == "precision", favor == "recall"
    document = trafilatura.bare_extraction(
        html, url=url, favor_precision=precision, favor_recall=recall, **_OPTIONS
    )
    if not isinstance(document, trafilatura.settings.Document) or document.body is None:
        return None
    markdown = _normal(document.text or "")
    if _render is not None:
        body = copy.deepcopy(document.body)
        etree.strip_tags(body, "ref")  # a link's text stays, its target goes
        text = _normal(_render(body, False))
    else:  # a trafilatura without its renderer: extract again, as text
        options = {**_OPTIONS, "include_links": False, "include_formatting": False}
        plain = trafilatura.extract(html, url=url, favor_precision=precision, favor_recall=recall, **options)
        text = _normal(plain or "")
    if not text:
        return None
    return MainContent(markdown=markdown, text=text)


def _normal(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip()
