"""Pages without a declared charset are decoded right: BOM, then <meta>, then detection."""

from __future__ import annotations

from pathlib import Path

import pytest

from crawler.parse.extract import compile_fields, extract

PAGES = Path(__file__).parent / "pages"
URL = "https://ex.test/"


@pytest.mark.parametrize(
    ("name", "title", "price"),
    [
        ("latin1.html", "Crème brûlée à la française", "12,50 EUR"),
        ("cp1252.html", "Crème brûlée à la française", "12,50 €"),
        ("shift_jis.html", "日本語のページ", "1,299円"),
        ("utf8.html", "Crème brûlée à la française", "12,50 €"),
    ],
)
def test_undeclared_pages_are_detected(name: str, title: str, price: str) -> None:
    body = (PAGES / name).read_bytes()
    assert b"charset" not in body  # no declaration: neither header nor <meta>
    page = extract(body, URL, fields=compile_fields({"price": ".price"}))
    assert page.title == title
    assert page.data == {"price": price}


def test_a_bom_outranks_everything() -> None:
    body = "\ufeff<title>été</title>".encode("utf-16-le")
    assert extract(body, URL, charset="latin-1").title == "été"


def test_a_meta_outranks_detection() -> None:
    # cp1252 bytes that a <meta> calls ISO-8859-2: the declaration is obeyed (ř, not ø).
    body = b'<meta charset="iso-8859-2"><title>\xf8</title>'
    assert extract(body, URL).title == "ř"


def test_the_header_outranks_the_meta_and_detection() -> None:
    body = (PAGES / "shift_jis.html").read_bytes()
    assert extract(body, URL, charset="utf-8").title != "日本語のページ"  # told wrong, decoded as told


def test_valid_utf8_is_never_detected_as_something_else() -> None:
    body = "<title>Ærøskøbing</title>".encode()
    assert extract(body, URL).title == "Ærøskøbing"
