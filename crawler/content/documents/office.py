"""Office Open XML files' text, title and page count: DOCX (python-docx), XLSX (openpyxl), PPTX
(python-pptx). Each is a zip that crawler.content.documents.zips has checked first."""

from __future__ import annotations

import io
import zipfile

import docx
import openpyxl
import pptx
from docx.table import Table
from docx.text.paragraph import Paragraph
from lxml import etree

from crawler.content.documents.limits import DocumentLimits
from crawler.content.documents.text import TextSink, clean_title

# The count of pages Word (or another editor) saved with the file: DOCX has no pages of its own.
_APP_PART = "docProps/app.xml"
_APP_MAX = 1024 * 1024
_PAGES = etree.XPath("string(//*[local-name()='Pages'])")
_SAFE_XML = etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False)

Read = tuple[str, str | None, int | None, bool]  # text, title, pages, truncated


def read_docx(body: bytes, limits: DocumentLimits) -> Read:
    """A Word document's paragraphs and tables in order; its pages as its editor counted them."""
    document = docx.Document(io.BytesIO(body))
    sink = TextSink(limits.max_chars)
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            sink.add(block.text)
        elif isinstance(block, Table):
            for row in block.rows:
                sink.add(" | ".join(cell.text.strip() for cell in row.cells))
                if sink.full:
                    break
        if sink.full:
            break
    return sink.text(), clean_title(document.core_properties.title), _saved_pages(body), sink.truncated


def _saved_pages(body: bytes) -> int | None:
    with zipfile.ZipFile(io.BytesIO(body)) as archive:
        try:
            info = archive.getinfo(_APP_PART)
        except KeyError:
            return None
        if info.file_size > _APP_MAX:
            return None
        try:
            root = etree.fromstring(archive.read(info), _SAFE_XML)
        except etree.XMLSyntaxError:
            return None
    pages = str(_PAGES(root)).strip()
    return int(pages) if pages.isdigit() else None


def read_xlsx(body: bytes, limits: DocumentLimits) -> Read:
    """A workbook's cells, sheet by sheet (a sheet's name, then its rows, cells tab-separated), as
    values the file saved (never formulas); its pages are its sheets."""
    workbook = openpyxl.load_workbook(io.BytesIO(body), read_only=True, data_only=True)
    try:
        sheets = workbook.worksheets
        sink = TextSink(limits.max_chars)
        for sheet in sheets:
            sink.add(sheet.title)
            for row in sheet.iter_rows(values_only=True):
                sink.add("\t".join("" if v is None else str(v) for v in row).rstrip("\t"))
                if sink.full:
                    break
            if sink.full:
                break
        return sink.text(), clean_title(workbook.properties.title), len(sheets), sink.truncated
    finally:
        workbook.close()


def read_pptx(body: bytes, limits: DocumentLimits) -> Read:
    """A presentation's text frames and tables, slide by slide; its pages are its slides."""
    presentation = pptx.Presentation(io.BytesIO(body))
    sink = TextSink(limits.max_chars)
    slides = presentation.slides
    first_title = None
    for slide in slides:
        title_shape = slide.shapes.title
        if first_title is None and title_shape is not None and title_shape.has_text_frame:
            first_title = title_shape.text_frame.text
        for shape in slide.shapes:
            if shape.has_text_frame:
                sink.add(shape.text_frame.text)
            elif getattr(shape, "has_table", False) and shape.has_table:
                for row in shape.table.rows:
                    sink.add(" | ".join(cell.text.strip() for cell in row.cells))
        if sink.full:
            break
    title = clean_title(presentation.core_properties.title) or clean_title(first_title)
    return sink.text(), title, len(slides), sink.truncated
