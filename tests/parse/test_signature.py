"""A page's signature changes with what a reader sees, and with nothing else."""

from __future__ import annotations

from crawler.parse.extract import extract
from crawler.parse.signature import signature, signature_of

BASE = (
    "<html><head><title>{title}</title><meta name=csrf content='{nonce}'><script>var n='{nonce}'</script>"
    "<link rel=preload href='/a.js?v={nonce}'></head><body class='{nonce}'><!-- built {nonce} -->"
    "<h1 id='x{nonce}'>Widget</h1><p>{text}</p><a href='/p?{nonce}'>next</a>"
    "<script nonce='{nonce}'>track('{nonce}')</script><style>.a{{color:red}}</style></body></html>"
)


def sign(title: str = "Widget", text: str = "Price 3.99", nonce: str = "1", data: object = None) -> str:
    page = extract(BASE.format(title=title, text=text, nonce=nonce).encode(), "http://a.test/")
    return signature(page.root, page.title, data if data is not None else {"price": "3.99"})  # type: ignore[arg-type]


def test_nonces_tokens_comments_attributes_and_layout_are_no_change() -> None:
    assert sign(nonce="1") == sign(nonce="2")
    spaced = extract(
        BASE.format(title="Widget", text="Price\n   3.99", nonce="3").replace("<p>", "<p>\n  ").encode(),
        "http://a.test/",
    )
    assert signature(spaced.root, spaced.title, {"price": "3.99"}) == sign()


def test_the_text_the_title_and_the_fields_are_changes() -> None:
    assert sign(text="Price 2.99") != sign()
    assert sign(title="Widget (sold out)") != sign()
    assert sign(data={"price": "2.99"}) != sign()


def test_what_is_not_parsed_is_signed_by_what_stands_for_it() -> None:
    assert signature_of("application/pdf", "1000", '"e1"', None) != signature_of(
        "application/pdf", "1001", '"e1"', None
    )
    assert signature_of("http://a.test/new") == signature_of("http://a.test/new")
