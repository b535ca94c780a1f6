"""One entry for every document: check its size and kind, check its zip, read it with its library.

CPU- and memory-heavy on hostile input: run it in a ContentPool, whose processes bound its time and
memory; what these checks catch first is refused without either being spent.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from crawler.content.documents.kinds import Kind, document_kind
from crawler.content.documents.limits import DocumentLimits
from crawler.content.documents.zips import check_zip
from crawler.content.refusal import Refusal
from crawler.errors import DocumentRefused


@dataclass(frozen=True, slots=True)
class Document:
    """A document's text, title (from its metadata, or a presentation's first slide) and pages:
    pages of a PDF, as saved in a DOCX or ODT (None if not saved), sheets of a workbook, slides of a
    presentation. `truncated`: the text stops at the limit's max_chars."""

    kind: Kind
    text: str
    title: str | None
    pages: int | None
    truncated: bool = False


def read_document(
    body: bytes, content_type: str | None, url: str | None = None, limits: DocumentLimits | None = None
) -> Document:
    """Read a PDF or office file; DocumentRefused says why one is not read."""
    limits = limits or DocumentLimits()
    if len(body) > limits.max_bytes:
        raise DocumentRefused(Refusal.TOO_LARGE, f"{len(body):,} bytes (at most {limits.max_bytes:,})")
    kind = document_kind(body, content_type, url)
    if kind is not Kind.PDF:
        check_zip(body, limits)
    try:
        with warnings.catch_warnings():
            # The readers warn of what they skip (unknown styles, extensions): not the crawl's concern.
            warnings.simplefilter("ignore")
            text, title, pages, truncated = _read(kind, body, limits)
    except (DocumentRefused, MemoryError):
        raise
    except Exception as e:  # each library fails its own way on a broken file: all are "corrupt"
        raise DocumentRefused(
            Refusal.CORRUPT, f"its {kind.value.upper()} reader failed: {type(e).__name__}: {e}"
        ) from None
    return Document(kind=kind, text=text, title=title, pages=pages, truncated=truncated)


def _read(kind: Kind, body: bytes, limits: DocumentLimits) -> tuple[str, str | None, int | None, bool]:
    # Each library is imported when its kind is first read: a process reading only PDFs never loads
    # the office libraries.
    if kind is Kind.PDF:
        from crawler.content.documents.pdf import read_pdf

        return read_pdf(body, limits)
    if kind in (Kind.ODT, Kind.ODS, Kind.ODP):
        from crawler.content.documents.odf import read_odf

        return read_odf(body, kind, limits)
    from crawler.content.documents import office

    readers = {Kind.DOCX: office.read_docx, Kind.XLSX: office.read_xlsx, Kind.PPTX: office.read_pptx}
    return readers[kind](body, limits)
