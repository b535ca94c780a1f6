"""The jobs a worker sends its content pool: everything content makes of one page or one document, in
one trip to a process."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from crawler.content.documents import DocumentLimits, read_document
from crawler.content.language import Language, detect_language
from crawler.content.main import Favor, main_content
from crawler.content.simhash import simhash


@dataclass(frozen=True, slots=True)
class Content:
    """A page's or a document's content (docs/content.md says what each field holds). `markdown`,
    `title` and `pages` are those of the kind that has them: a page's title is its parser's."""

    kind: str  # "html", or a document's Kind
    text: str
    markdown: str | None
    lang: Language | None
    simhash: int | None
    title: str | None = None
    pages: int | None = None
    truncated: bool = False

    def kept(self, formats: Collection[str]) -> tuple[str | None, str | None]:
        """Its Markdown and text, each None unless `formats` (a domain's `content.formats`) asks for it."""
        return (
            self.markdown if "markdown" in formats else None,
            self.text if "text" in formats else None,
        )


def html_content(html: str | bytes, url: str | None = None, favor: Favor = "precision") -> Content | None:
    """A page's main content, its language and its simhash; None if it has no main content."""
    found = main_content(html, url=url, favor=favor)
    if found is None:
        return None
    return Content(
        kind="html",
        text=found.text,
        markdown=found.markdown,
        lang=detect_language(found.text),
        simhash=simhash(found.text),
    )


def document_content(
    body: bytes, content_type: str | None, url: str | None = None, limits: DocumentLimits | None = None
) -> Content:
    """A document's text, title, pages, language and simhash; DocumentRefused if it is not read."""
    document = read_document(body, content_type, url, limits)
    return Content(
        kind=document.kind.value,
        text=document.text,
        markdown=None,
        lang=detect_language(document.text),
        simhash=simhash(document.text),
        title=document.title,
        pages=document.pages,
        truncated=document.truncated,
    )
