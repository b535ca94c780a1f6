"""Documents read into text, title and page count; hostile ones refused with a reason, in the pool's
processes, while the caller's event loop goes on."""

from __future__ import annotations

import asyncio

import pytest

from bench import documents as files
from crawler.content.documents import DocumentLimits, Kind, is_document, read_document
from crawler.content.pool import ContentPool, PoolLimits
from crawler.content.refusal import Refusal
from crawler.errors import ContentRefused, DocumentRefused
from tests.content.test_pool import Ticker

PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODT = "application/vnd.oasis.opendocument.text"


def test_a_pdf_gives_its_text_title_and_pages() -> None:
    body = files.pdf(["The first page speaks.", "The second page answers."], title="A Dialogue")
    document = read_document(body, PDF)
    assert document.kind is Kind.PDF
    assert document.text == "The first page speaks.\nThe second page answers."
    assert (document.title, document.pages, document.truncated) == ("A Dialogue", 2, False)


def test_a_docx_gives_its_paragraphs_and_tables_in_order() -> None:
    body = files.docx_file(
        ["Quarterly report", "Sales rose in every region.", "Costs held steady."],
        title="Q3",
        table=[["Region", "Sales"], ["North", "120"]],
    )
    document = read_document(body, f"{DOCX}; charset=binary")
    assert document.kind is Kind.DOCX and document.title == "Q3"
    assert document.text.splitlines() == [
        "Quarterly report",
        "Sales rose in every region.",
        "Costs held steady.",
        "Region | Sales",
        "North | 120",
    ]


def test_a_workbook_gives_its_cells_and_its_sheets_as_pages() -> None:
    body = files.xlsx_file(
        {"Prices": [["item", "price"], ["lamp", 12.5]], "Stock": [["lamp", 3]]}, title="Shop"
    )
    document = read_document(body, XLSX)
    assert document.text.splitlines() == ["Prices", "item\tprice", "lamp\t12.5", "Stock", "lamp\t3"]
    assert (document.title, document.pages) == ("Shop", 2)


def test_a_presentation_gives_its_slides_text_and_first_title() -> None:
    document = read_document(files.pptx_file([("Roadmap", "Ship in May"), ("Risks", "None known")]), PPTX)
    assert document.text.splitlines() == ["Roadmap", "Ship in May", "Risks", "None known"]
    assert (document.title, document.pages) == ("Roadmap", 2)


def test_an_odt_gives_its_headings_and_paragraphs() -> None:
    document = read_document(
        files.odt_file(["Minutes", "All present.", "Nothing to add."], title="Board"), ODT
    )
    assert document.kind is Kind.ODT
    assert document.text.splitlines() == ["Minutes", "All present.", "Nothing to add."]
    assert document.title == "Board"


def test_a_generic_type_is_settled_by_the_bytes() -> None:
    assert read_document(files.pdf(["x"]), "application/octet-stream").kind is Kind.PDF
    assert read_document(files.docx_file(["x"]), None, url="https://a.test/download?id=3").kind is Kind.DOCX
    assert is_document(f"{PDF}; qs=1") and is_document(ODT) and not is_document("text/html")


def test_text_past_the_limit_is_cut_and_said_to_be() -> None:
    body = files.pdf([f"Page {i} " + "word " * 50 for i in range(20)])
    document = read_document(body, PDF, limits=DocumentLimits(max_chars=1000))
    assert document.truncated and len(document.text) == 1000


def test_a_pdf_encrypted_only_against_editing_is_read() -> None:
    document = read_document(files.encrypted_pdf(user_password=""), PDF)
    assert document.text == "Secret page"


# Each hostile document, what it is refused for, and words its message must have.
HOSTILE = {
    "a PDF of 10,000 pages": (
        lambda: files.pdf(["same page"] * 10_000),
        PDF,
        Refusal.TOO_MANY_PAGES,
        "10,000 pages",
    ),
    "a PDF declaring 1 page and holding 2,500": (
        lambda: files.pdf(["same page"] * 2500, count=1),
        PDF,
        Refusal.TOO_MANY_PAGES,
        "2,500 pages",
    ),
    "an encrypted PDF": (lambda: files.encrypted_pdf("secret"), PDF, Refusal.ENCRYPTED, "password"),
    "a zip bomb inside a DOCX": (files.docx_with_bomb, DOCX, Refusal.ZIP_BOMB, "inflates to"),
    "a DOCX part hiding a bomb behind a small size": (
        files.docx_with_lying_part,
        DOCX,
        Refusal.CORRUPT,
        "does not inflate to the size it declares",
    ),
    "an HTML page that says it is a PDF": (
        lambda: b"<html><body>Hi</body></html>",
        PDF,
        Refusal.TYPE_MISMATCH,
        "PDF",
    ),
    "a PDF that says it is a DOCX": (lambda: files.pdf(["x"]), DOCX, Refusal.TYPE_MISMATCH, "a PDF file"),
    "a DOCX named .pdf": (
        lambda: files.docx_file(["x"]),
        "application/octet-stream",
        Refusal.TYPE_MISMATCH,
        "DOCX",
    ),
    "a broken PDF": (lambda: b"%PDF-1.7\n1 0 obj << /Type /Catalog", PDF, Refusal.CORRUPT, "pypdf"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_document_is_refused_with_its_reason(name: str) -> None:
    make, content_type, reason, words = HOSTILE[name]
    with pytest.raises(DocumentRefused) as refused:
        read_document(make(), content_type, url="https://a.test/file.pdf")
    assert refused.value.reason == reason
    assert words in str(refused.value)


async def test_hostile_documents_never_stall_the_caller() -> None:
    limits = PoolLimits(processes=1, seconds=20.0)
    bodies = [
        (name, make(), content_type, reason) for name, (make, content_type, reason, _) in HOSTILE.items()
    ]
    async with ContentPool(limits) as content:
        ticker = Ticker()
        ticking = asyncio.create_task(ticker.run())
        for name, body, content_type, reason in bodies:
            with pytest.raises(ContentRefused) as refused:
                await content.run(read_document, body, content_type, "https://a.test/file.pdf")
            assert refused.value.reason == reason, name
        ticking.cancel()
        # The loop turned all along: reading the 2,500 pages alone takes over a second.
        assert ticker.ticks > 0 and ticker.longest < 0.5
        document = await content.run(read_document, files.pdf(["Still reading."]), PDF)
        assert document.text == "Still reading."
