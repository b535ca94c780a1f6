"""The pool's jobs: all that content makes of a page or a document, in one trip to a process."""

from __future__ import annotations

from pathlib import Path

from bench import documents as files
from crawler.content.jobs import document_content, html_content
from crawler.content.pool import ContentPool, PoolLimits
from crawler.content.simhash import simhash

ARTICLE = (Path(__file__).parent / "pages" / "article.html").read_text(encoding="utf-8")
GERMAN = [
    "Alle Menschen sind frei und gleich an Würde und Rechten geboren.",
    "Sie sind mit Vernunft und Gewissen begabt und sollen einander im Geist der Brüderlichkeit begegnen.",
]


async def test_a_page_and_a_document_in_the_pools_processes() -> None:
    async with ContentPool(PoolLimits(processes=1)) as pool:
        page = await pool.run(html_content, ARTICLE, "https://gazette.test/guides/brewing")
        document = await pool.run(document_content, files.pdf(GERMAN, title="Artikel 1"), "application/pdf")
        nothing = await pool.run(html_content, "<html><body></body></html>")
    assert page is not None and page.kind == "html"
    assert page.markdown is not None and page.markdown.startswith("# How to brew better coffee at home")
    assert page.lang is not None and page.lang.code == "en"
    assert page.simhash == simhash(page.text)
    assert (document.kind, document.title, document.pages, document.markdown) == ("pdf", "Artikel 1", 2, None)
    assert document.lang is not None and document.lang.code == "de"
    assert document.simhash == simhash("\n".join(GERMAN))
    assert nothing is None
