"""A PDF's text, title and page count, by pypdf."""

from __future__ import annotations

import io
import logging

from pypdf import PasswordType, PdfReader
from pypdf.errors import DependencyError, FileNotDecryptedError, PdfReadError

from crawler.content.documents.limits import DocumentLimits
from crawler.content.documents.text import TextSink, clean_title
from crawler.content.refusal import Refusal
from crawler.errors import DocumentRefused

# pypdf logs every repair it makes to a broken file at WARNING: the page's refusal (or not) says enough.
logging.getLogger("pypdf").setLevel(logging.ERROR)


def read_pdf(body: bytes, limits: DocumentLimits) -> tuple[str, str | None, int, bool]:
    """(text, title, pages, truncated) of a PDF; refused if encrypted or longer than max_pages."""
    try:
        reader = PdfReader(io.BytesIO(body), strict=False)
    except PdfReadError as e:
        raise DocumentRefused(Refusal.CORRUPT, f"pypdf cannot read it: {e}") from None
    if reader.is_encrypted:
        _decrypt(reader)
    # The count the file declares, first: refusing on it costs nothing. Then the page tree itself,
    # which may hold more than it declares.
    declared = _declared_pages(reader)
    if isinstance(declared, int) and declared > limits.max_pages:
        raise DocumentRefused(Refusal.TOO_MANY_PAGES, f"{declared:,} pages (at most {limits.max_pages:,})")
    pages = len(reader.pages)
    if pages > limits.max_pages:
        raise DocumentRefused(Refusal.TOO_MANY_PAGES, f"{pages:,} pages (at most {limits.max_pages:,})")
    sink = TextSink(limits.max_chars)
    for page in reader.pages:
        sink.add(page.extract_text())
        if sink.full:
            break
    metadata = reader.metadata
    title = metadata.title if metadata is not None else None
    return sink.text(), clean_title(title), pages, sink.truncated


def _decrypt(reader: PdfReader) -> None:
    """Open a PDF encrypted with no user password (an owner password only restricts printing and the
    like); refuse one that needs a password."""
    try:
        opened = reader.decrypt("")
    except (DependencyError, FileNotDecryptedError, NotImplementedError, PdfReadError) as e:
        raise DocumentRefused(
            Refusal.ENCRYPTED, f"encrypted, and cannot be opened without a password: {e}"
        ) from None
    if opened == PasswordType.NOT_DECRYPTED:
        raise DocumentRefused(Refusal.ENCRYPTED, "encrypted with a password")


def _declared_pages(reader: PdfReader) -> int | None:
    """The page count the file's page tree declares (its /Count), unchecked."""
    pages = reader.root_object.get("/Pages")
    tree = pages.get_object() if pages is not None else None
    count = tree.get("/Count") if isinstance(tree, dict) else None
    return count if isinstance(count, int) else None
