"""What kind of document a body is: by its bytes, checked against what its Content-Type (or, for a
generic type, its URL's extension) says it is."""

from __future__ import annotations

import io
import zipfile
import zlib
from enum import StrEnum
from urllib.parse import urlsplit

from crawler.content.refusal import Refusal
from crawler.errors import DocumentRefused


class Kind(StrEnum):
    """A document format the readers know."""

    PDF = "pdf"
    DOCX = "docx"
    XLSX = "xlsx"
    PPTX = "pptx"
    ODT = "odt"
    ODS = "ods"
    ODP = "odp"


_OOXML = "application/vnd.openxmlformats-officedocument."
_ODF = "application/vnd.oasis.opendocument."
MEDIA_TYPES: dict[str, Kind] = {
    "application/pdf": Kind.PDF,
    "application/x-pdf": Kind.PDF,
    _OOXML + "wordprocessingml.document": Kind.DOCX,
    _OOXML + "spreadsheetml.sheet": Kind.XLSX,
    _OOXML + "presentationml.presentation": Kind.PPTX,
    _ODF + "text": Kind.ODT,
    _ODF + "spreadsheet": Kind.ODS,
    _ODF + "presentation": Kind.ODP,
}
# Types that say nothing of what a file is: the bytes (and the URL's extension) decide.
GENERIC_TYPES = frozenset(
    {
        "",
        "application/octet-stream",
        "binary/octet-stream",
        "application/binary",
        "application/download",
        "application/force-download",
        "application/x-download",
        "application/zip",
        "application/x-zip-compressed",
    }
)
_EXTENSIONS = {f".{kind.value}": kind for kind in Kind}
# An OOXML package's main part names its kind.
_OOXML_PARTS = (
    ("word/document.xml", Kind.DOCX),
    ("xl/workbook.xml", Kind.XLSX),
    ("ppt/presentation.xml", Kind.PPTX),
)
_ODF_MIMETYPES = {value: kind for value, kind in MEDIA_TYPES.items() if value.startswith(_ODF)}
_PDF_MAGIC = b"%PDF-"
_ZIP_MAGIC = b"PK\x03\x04"
_MIMETYPE_MAX = 200  # an ODF file's `mimetype` member is one short line


def media_type(content_type: str | None) -> str:
    """The media type of a Content-Type header, lower-case, without parameters."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def is_document(content_type: str | None, url: str | None = None) -> bool:
    """True if a response of this Content-Type is for read_document (a PDF or an office file); with
    `url`, also one of a generic type (application/octet-stream) whose URL ends in a document's
    extension."""
    return declared(content_type, url) is not None


def sniff(body: bytes) -> Kind | None:
    """The kind of document the bytes are, whatever anyone says; None if none the readers know."""
    # PDF readers accept the header anywhere in the first KiB (junk before it is common).
    if _PDF_MAGIC in body[:1024]:
        return Kind.PDF
    if not body.startswith(_ZIP_MAGIC):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            names = set(archive.namelist())
            for part, kind in _OOXML_PARTS:
                if part in names and "[Content_Types].xml" in names:
                    return kind
            if "mimetype" in names:
                # read() would inflate a member that lies about its size up to 2 GiB at once
                with archive.open("mimetype") as member:
                    value = member.read(_MIMETYPE_MAX).decode("ascii", "replace").strip()
                return _ODF_MIMETYPES.get(value)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        NotImplementedError,
        RuntimeError,
        ValueError,
        OSError,
        zlib.error,
    ):
        return None
    return None


def declared(content_type: str | None, url: str | None = None) -> Kind | None:
    """The kind the response claims: its Content-Type's, or with a generic type its URL's extension."""
    media = media_type(content_type)
    if media in MEDIA_TYPES:
        return MEDIA_TYPES[media]
    if media in GENERIC_TYPES and url:
        path = urlsplit(url).path.lower()
        for extension, kind in _EXTENSIONS.items():
            if path.endswith(extension):
                return kind
    return None


def document_kind(body: bytes, content_type: str | None, url: str | None = None) -> Kind:
    """The kind of `body`, which must be what it claims to be; else DocumentRefused says why."""
    media = media_type(content_type)
    claimed = declared(content_type, url)
    found = sniff(body)
    if claimed is not None and found != claimed:
        what = f"a {found.value.upper()} file" if found else "no document the readers know"
        raise DocumentRefused(
            Refusal.TYPE_MISMATCH,
            f"the response says it is {claimed.value.upper()} ({media or 'by its URL'}), "
            f"but its bytes are {what}",
        )
    if found is None:
        raise DocumentRefused(Refusal.UNSUPPORTED, f"not a document the readers know ({media or 'no type'})")
    if claimed is None and media not in GENERIC_TYPES:
        raise DocumentRefused(
            Refusal.TYPE_MISMATCH,
            f"the response says it is {media}, but its bytes are a {found.value.upper()} file",
        )
    return found
