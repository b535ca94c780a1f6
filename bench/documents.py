"""Documents: each kind read, and the hostile ones refused, timed in this process and through the
content pool; and the makers of those documents, which tests/content uses too.

python -m bench.documents [--rounds 5]

PDFs are written by hand (any number of pages, in milliseconds), office files by their own libraries,
zip bombs by hand (a deflate block of zeros repeated). Read: a document of each kind with 20 pages
(sheets, slides) of a paragraph each. Refused: a PDF of 10,000 pages, one declaring 1 page and holding
2,500, an encrypted PDF, a DOCX with a 300 MiB zip bomb, a DOCX whose part hides 64 MiB behind 1 KiB,
an HTML page served as a PDF. Times are the fastest of --rounds, in ms; through the pool they include
pickling the body there and the answer back.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import io
import struct
import time
import zipfile
import zlib
from collections.abc import Callable, Sequence

import docx
import openpyxl
import pptx
from odf import dc, text
from odf.opendocument import OpenDocumentText
from pypdf import PdfReader, PdfWriter

from crawler.content.documents import Document, read_document
from crawler.content.pool import ContentPool, PoolLimits
from crawler.errors import ContentRefused

MiB = 1024 * 1024


def _pdf_string(value: str) -> bytes:
    escaped = value.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
    return b"(" + escaped.encode("latin-1") + b")"


def pdf(pages: Sequence[str], *, title: str | None = None, count: int | None = None) -> bytes:
    """A PDF with one line of Helvetica text per page; `count` is the page count its tree declares
    (default: the truth). Pages with the same text share one content stream."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below, once the page tree's number is known
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    info = add(b"<< /Title " + _pdf_string(title) + b" >>") if title else None
    streams: dict[str, int] = {}
    kids = []
    for line in pages:
        if line not in streams:
            content = b"BT /F1 12 Tf 72 720 Td " + _pdf_string(line) + b" Tj ET"
            streams[line] = add(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (tree, streams[line], font)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    refs = b" ".join(b"%d 0 R" % k for k in kids)
    declared = len(pages) if count is None else count
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (refs, declared)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    trailer = b"<< /Size %d /Root %d 0 R" % (len(objects) + 1, catalog)
    if info:
        trailer += b" /Info %d 0 R" % info
    out.write(b"trailer\n" + trailer + b" >>\nstartxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def encrypted_pdf(user_password: str, owner_password: str = "owner") -> bytes:
    """A one-page PDF encrypted (RC4, which pypdf reads without a cryptography library)."""
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf(["Secret page"]))))
    writer.encrypt(user_password, owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_file(
    paragraphs: Sequence[str], *, title: str | None = None, table: Sequence[Sequence[str]] = ()
) -> bytes:
    """A Word document: a heading, the paragraphs, then a table if given."""
    document = docx.Document()
    if title:
        document.core_properties.title = title
    document.add_heading(paragraphs[0], level=1)
    for paragraph in paragraphs[1:]:
        document.add_paragraph(paragraph)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_file(sheets: dict[str, Sequence[Sequence[object]]], *, title: str | None = None) -> bytes:
    """A workbook with one sheet per entry."""
    workbook = openpyxl.Workbook()
    workbook.remove(workbook.active)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    if title:
        workbook.properties.title = title
    out = io.BytesIO()
    workbook.save(out)
    return out.getvalue()


def pptx_file(slides: Sequence[tuple[str, str]]) -> bytes:
    """A presentation, one (title, body) per slide."""
    presentation = pptx.Presentation()
    layout = presentation.slide_layouts[1]  # title and content
    for heading, body in slides:
        slide = presentation.slides.add_slide(layout)
        slide.shapes.title.text = heading
        slide.placeholders[1].text = body
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def odt_file(paragraphs: Sequence[str], *, title: str | None = None) -> bytes:
    """An OpenDocument text: a heading, then the paragraphs."""
    document = OpenDocumentText()
    if title:
        document.meta.addElement(dc.Title(text=title))
    document.text.addElement(text.H(outlinelevel=1, text=paragraphs[0]))
    for paragraph in paragraphs[1:]:
        document.text.addElement(text.P(text=paragraph))
    out = io.BytesIO()
    document.write(out)
    return out.getvalue()


def _deflated_zeros(size: int) -> tuple[bytes, int]:
    """(raw deflate data, CRC-32) of `size` zero bytes, a whole MiB at a time: one block compressed
    with a full flush stands alone, so it is compressed once and repeated."""
    assert size % MiB == 0
    block = zlib.compressobj(9, zlib.DEFLATED, -15)
    chunk = block.compress(bytes(MiB)) + block.flush(zlib.Z_FULL_FLUSH)
    end = zlib.compressobj(9, zlib.DEFLATED, -15).flush(zlib.Z_FINISH)
    crc = 0
    zeros = bytes(MiB)
    for _ in range(size // MiB):
        crc = zlib.crc32(zeros, crc)
    return chunk * (size // MiB) + end, crc


def zip_with(base: bytes, extra: dict[str, tuple[bytes, int, int]]) -> bytes:
    """`base`'s members, stored, with `extra` members (in place of any of the same name) given as
    (deflated data, CRC-32, the size its directory declares): a zip written by hand, since zipfile
    compresses what it writes itself, and never declares a size that is not the data's."""
    members: list[tuple[str, bytes, int, int, int]] = []  # name, data, crc, size, method
    with zipfile.ZipFile(io.BytesIO(base)) as source:
        for info in source.infolist():
            if info.filename in extra:
                continue
            data = source.read(info)
            members.append((info.filename, data, zlib.crc32(data), len(data), zipfile.ZIP_STORED))
    for name, (data, crc, size) in extra.items():
        members.append((name, data, crc, size, zipfile.ZIP_DEFLATED))
    out = io.BytesIO()
    central = io.BytesIO()
    for name, data, crc, size, method in members:
        offset = out.tell()
        encoded = name.encode()
        fields = struct.pack("<HHHHHIIIHH", 20, 0, method, 0, 0x21, crc, len(data), size, len(encoded), 0)
        out.write(b"PK\x03\x04" + fields + encoded + data)
        central.write(
            b"PK\x01\x02"
            + struct.pack(
                "<HHHHHHIIIHHHHHII",
                20,
                20,
                0,
                method,
                0,
                0x21,
                crc,
                len(data),
                size,
                len(encoded),
                0,
                0,
                0,
                0,
                0,
                offset,
            )
            + encoded
        )
    directory = central.getvalue()
    start = out.tell()
    out.write(directory)
    out.write(
        b"PK\x05\x06" + struct.pack("<HHHHIIH", 0, 0, len(members), len(members), len(directory), start, 0)
    )
    return out.getvalue()


def docx_with_bomb(inflated: int = 300 * MiB) -> bytes:
    """A valid DOCX that also holds a member inflating to `inflated` bytes of zeros (about 1,000:1)."""
    data, crc = _deflated_zeros(inflated)
    base = docx_file(["Harmless", "A document with a bomb inside."])
    return zip_with(base, {"word/media/image1.bin": (data, crc, inflated)})


def docx_with_lying_part(inflated: int = 64 * MiB) -> bytes:
    """A DOCX whose document part declares 1 KiB but inflates to `inflated` bytes: a bomb that hides
    from a check of declared sizes."""
    data, crc = _deflated_zeros(inflated)
    base = docx_file(["Harmless", "A document with a lie inside."])
    return zip_with(base, {"word/document.xml": (data, crc, 1024)})


PARAGRAPH = (
    "The committee met on the third floor and read the minutes of the last meeting aloud. "
    "Nobody objected, and the chair moved on to the budget, which had grown by a tenth since spring."
)
MEDIA = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "odt": "application/vnd.oasis.opendocument.text",
}


def readable() -> dict[str, tuple[bytes, str]]:
    """A document of each kind, 20 pages (sheets, slides) of a paragraph each."""
    pages = [f"{i}. {PARAGRAPH}" for i in range(20)]
    return {
        "pdf, 20 pages": (pdf(pages, title="Minutes"), MEDIA["pdf"]),
        "docx, 20 paragraphs": (docx_file(pages, title="Minutes"), MEDIA["docx"]),
        "xlsx, 20 sheets": (xlsx_file({f"S{i}": [[p]] for i, p in enumerate(pages)}), MEDIA["xlsx"]),
        "pptx, 20 slides": (pptx_file([(f"Slide {i}", p) for i, p in enumerate(pages)]), MEDIA["pptx"]),
        "odt, 20 paragraphs": (odt_file(pages, title="Minutes"), MEDIA["odt"]),
    }


def hostile() -> dict[str, tuple[bytes, str]]:
    """The documents a reader must refuse, each with the type it is served as."""
    return {
        "pdf of 10,000 pages": (pdf(["same page"] * 10_000), MEDIA["pdf"]),
        "pdf declaring 1 page, holding 2,500": (pdf(["same page"] * 2500, count=1), MEDIA["pdf"]),
        "encrypted pdf": (encrypted_pdf("secret"), MEDIA["pdf"]),
        "docx with a 300 MiB zip bomb": (docx_with_bomb(), MEDIA["docx"]),
        "docx part hiding 64 MiB": (docx_with_lying_part(), MEDIA["docx"]),
        "html served as pdf": (b"<html><body>Hi</body></html>", MEDIA["pdf"]),
    }


def _best(action: Callable[[], object], rounds: int) -> tuple[float, object]:
    best, outcome = float("inf"), None
    for _ in range(rounds):
        started = time.perf_counter()
        try:
            outcome = action()
        except ContentRefused as refused:
            outcome = refused
        best = min(best, time.perf_counter() - started)
    return best * 1000, outcome


async def _through_pool(bodies: dict[str, tuple[bytes, str]], rounds: int) -> dict[str, float]:
    timed = {}
    async with ContentPool(PoolLimits(processes=1)) as pool:
        for name, (body, media) in bodies.items():
            best = float("inf")
            for _ in range(rounds):
                started = time.perf_counter()
                with contextlib.suppress(ContentRefused):
                    await pool.run(read_document, body, media)
                best = min(best, time.perf_counter() - started)
            timed[name] = best * 1000
    return timed


def _said(outcome: object) -> str:
    if isinstance(outcome, ContentRefused):
        return f"refused: {outcome.reason}"
    if isinstance(outcome, Document):
        return f"read: {len(outcome.text):,} characters, {outcome.pages} pages"
    return str(outcome)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    bodies = {**readable(), **hostile()}
    pooled = asyncio.run(_through_pool(bodies, args.rounds))
    print(f"{'document':<38} {'bytes':>10} {'ms here':>8} {'ms pooled':>9}  outcome")
    for name, (body, media) in bodies.items():
        ms, outcome = _best(functools.partial(read_document, body, media), args.rounds)
        print(f"{name:<38} {len(body):>10,} {ms:>8.1f} {pooled[name]:>9.1f}  {_said(outcome)}")


if __name__ == "__main__":
    main()
