"""A page's main content: its article as Markdown and as text, without the page's menus, cookie
banner, related links and footer."""

from __future__ import annotations

from pathlib import Path

from crawler.content import main
from crawler.content.main import main_content

ARTICLE = (Path(__file__).parent / "pages" / "article.html").read_text(encoding="utf-8")
URL = "https://gazette.test/guides/brewing"
BOILERPLATE = (
    "Accept all cookies",
    "Privacy settings",
    "Subscribe today",
    "Related stories",
    "Ten mugs we love",
    "Copyright 2024",
    "Terms of use",
)


def test_markdown_keeps_headings_lists_tables_links_and_code() -> None:
    found = main_content(ARTICLE, url=URL)
    assert found is not None
    lines = found.markdown.splitlines()
    assert "# How to brew better coffee at home" in lines
    assert "## Ratios by method" in lines
    assert "- A burr grinder, set to medium-fine" in lines
    assert any(line.replace(" ", "").startswith("|Pour-over|15|250|") for line in lines)
    # A relative link, made absolute against the page's URL.
    assert "[brew ratio guide](https://gazette.test/guides/ratio)" in found.markdown
    fence = lines.index("```")
    assert lines[fence + 1] == "def water_for(coffee_grams, ratio=16):"
    assert lines[fence + 2] == "    return coffee_grams * ratio"
    assert not [b for b in BOILERPLATE if b in found.markdown]


def test_text_has_the_article_words_without_markup_or_link_targets() -> None:
    found = main_content(ARTICLE, url=URL)
    assert found is not None
    assert found.text.startswith("How to brew better coffee at home\nGood coffee at home")
    assert "The brew ratio guide explains why" in found.text
    assert "](" not in found.text and "https://" not in found.text and "**" not in found.text
    assert "write down what you did" in found.text
    assert not [b for b in BOILERPLATE if b in found.text]


def test_a_page_without_text_has_no_main_content() -> None:
    assert (
        main_content("<html><head><title>App</title></head><body><script>boot()</script></body></html>")
        is None
    )
    assert main_content("<html><body><div><img src='a.png'></div></body></html>") is None
    assert main_content("") is None


def test_bytes_are_decoded_by_their_declared_charset() -> None:
    page = ARTICLE.replace("coffee at home starts", "café at home starts").encode("utf-8")
    found = main_content(page, url=URL)
    assert found is not None and "café at home starts" in found.text


def test_one_extraction_makes_both_forms() -> None:
    # The text comes from trafilatura's own renderer over the tree its Markdown came from: if an
    # upgrade moves it, main_content falls back to a second extraction, at twice the cost.
    assert main._render is not None
