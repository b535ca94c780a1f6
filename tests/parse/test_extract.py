"""Tests for crawler.extract: links, title, fields, charsets and hostile pages."""

from __future__ import annotations

import random
from urllib.parse import urljoin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.config import FieldRule
from crawler.parse.extract import Extracted, _Joiner, charset_from_content_type, compile_fields, extract

PAGE = "https://ex.com/a/page.html"


def links(html: str, url: str = PAGE) -> list[str]:
    return extract(html.encode(), url).links


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<a href="b.html">', ["https://ex.com/a/b.html"]),
        ('<a href="/root">', ["https://ex.com/root"]),
        ('<a href="../up">', ["https://ex.com/up"]),
        ('<a href="?q=1">', ["https://ex.com/a/page.html?q=1"]),
        ('<a href="//cdn.ex.org/x">', ["https://cdn.ex.org/x"]),
        ('<a href="http://other.org/Path?A=B">', ["http://other.org/Path?A=B"]),
        ('<a href="HTTP://Other.org/">', ["HTTP://Other.org/"]),
        ('<map><area href="/area"></map>', ["https://ex.com/area"]),
        ('<a name="no-href">x</a><a href="/x">', ["https://ex.com/x"]),
        ('<a href=" \n\t/spaced \t">', ["https://ex.com/spaced"]),
        # Fragments are kept as given: canonicalising is the router's job.
        ('<a href="#top">', ["https://ex.com/a/page.html#top"]),
        ('<a href="/x#frag">', ["https://ex.com/x#frag"]),
        # Document order, duplicates (also after resolution) removed.
        (
            '<a href="/2"><a href="/1"><a href="/2"><a href="./b"><a href="b"><area href="/1">',
            ["https://ex.com/2", "https://ex.com/1", "https://ex.com/a/b"],
        ),
        ('<a href="mailto:a@ex.com">', []),
        ('<a href="javascript:void(0)">', []),
        ('<a href=" JavaScript:alert(1)">', []),
        ('<a href="tel:+123">', []),
        ('<a href="data:text/html,<a>">', []),
        ('<a href="ftp://ex.com/f">', []),
        ('<a href="file:///etc/passwd">', []),
        ('<a href="http://[::1/bad-ipv6"><a href="/ok">', ["https://ex.com/ok"]),
        ('<a href="/' + "x" * 4096 + '"><a href="/short">', ["https://ex.com/short"]),
        ('<a href="/' + "x" * 4095 + '">', ["https://ex.com/" + "x" * 4095]),  # 4096 chars
    ],
)
def test_links(html: str, expected: list[str]) -> None:
    assert links(html) == expected


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ('<base href="/sub/"><a href="x">', ["https://ex.com/sub/x"]),
        (
            '<base href="https://cdn.ex.org/b/"><a href="x"><a href="/y">',
            ["https://cdn.ex.org/b/x", "https://cdn.ex.org/y"],
        ),
        ('<base href="/one/"><base href="/two/"><a href="x">', ["https://ex.com/one/x"]),
        ('<base target="_top"><base href="/two/"><a href="x">', ["https://ex.com/two/x"]),
        ('<base href="javascript:x"><a href="x">', ["https://ex.com/a/x"]),
        ('<base href="http://[bad"><a href="x">', ["https://ex.com/a/x"]),
        ('<base href="  "><a href="x">', ["https://ex.com/a/x"]),
    ],
)
def test_base_href(html: str, expected: list[str]) -> None:
    assert links(html) == expected


def test_links_need_an_http_page_url_for_relative_hrefs() -> None:
    html = '<a href="rel"><a href="https://ex.com/abs">'
    assert links(html, url="not a url") == ["https://ex.com/abs"]


def test_links_capped_at_max_links() -> None:
    html = "".join(f'<a href="/p/{i}">{i}</a>' for i in range(100_000))
    result = extract(html.encode(), PAGE)
    assert len(result.links) == 5000
    assert result.links[:2] == ["https://ex.com/p/0", "https://ex.com/p/1"]
    assert extract(html.encode(), PAGE, max_links=3).links == [
        "https://ex.com/p/0",
        "https://ex.com/p/1",
        "https://ex.com/p/2",
    ]
    assert extract(html.encode(), PAGE, max_links=0).links == []


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("<title>Hello</title>", "Hello"),
        ("<title>\n  Hello \t\n world \u00a0 </title>", "Hello world"),
        ("<title>Fish &amp; Chips</title>", "Fish & Chips"),
        ("<title>First</title><title>Second</title>", "First"),
        ("<title></title>", None),
        ("<title>   </title>", None),
        ("<p>no title</p>", None),
        ("<title>" + "t" * 5000 + "</title>", "t" * 1000),
        ("<title>" + "ab " * 600 + "</title>", ("ab " * 334)[:1000].rstrip()),
    ],
)
def test_title(html: str, expected: str | None) -> None:
    assert extract(html.encode(), PAGE).title == expected


FIELDS_HTML = """
<h1> Product
  <b>name</b> </h1>
<span class="price">  10.00 </span><span class="price">20.00</span>
<div id="long">{long}</div>
""".format(long="word " * 5000)


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("h1", "Product name"),
        (".price", "10.00"),
        ("span.price:nth-of-type(2)", "20.00"),
        ("h1, .price", "Product name"),
        (".missing", None),
        ("#long", ("word " * 2000)[:10_000].rstrip()),
    ],
)
def test_fields(selector: str, expected: str | None) -> None:
    fields = compile_fields({"f": selector})
    assert extract(FIELDS_HTML.encode(), PAGE, fields=fields).data == {"f": expected}


def test_fields_keep_every_name_and_order() -> None:
    fields = compile_fields({"name": "h1", "price": ".price", "none": "table"})
    data = extract(FIELDS_HTML.encode(), PAGE, fields=fields).data
    assert data == {"name": "Product name", "price": "10.00", "none": None}
    assert list(data) == ["name", "price", "none"]


@pytest.mark.parametrize(
    ("xpath", "expected"),
    [
        ("//span/@class", "price"),  # an attribute's value
        ("count(//span[@class='price'])", "2"),  # a number
        ("$undefined", None),  # fails at evaluation time
    ],
)
def test_xpath_field_yields_strings_and_numbers_as_text(xpath: str, expected: str | None) -> None:
    fields = compile_fields({"f": FieldRule(xpath=xpath)})
    assert extract(FIELDS_HTML.encode(), PAGE, fields=fields).data == {"f": expected}


@pytest.mark.parametrize("selector", ["a[", "", "a >", "p:nth-child(", "a::text", "::attr(href)"])
def test_invalid_selector_raises_value_error_naming_the_field(selector: str) -> None:
    with pytest.raises(ValueError, match="price") as info:
        compile_fields({"ok": "h1", "price": selector})
    assert repr(selector) in str(info.value)


HTTP_EQUIV_LATIN1 = b'<meta http-equiv="Content-Type" content="text/html; charset=ISO-8859-1">'


@pytest.mark.parametrize(
    ("body", "charset", "expected"),
    [
        (b'<meta charset="iso-8859-1"><title>caf\xe9</title>', None, "caf\u00e9"),
        (HTTP_EQUIV_LATIN1 + b"<title>caf\xe9</title>", None, "caf\u00e9"),
        (b"<title>caf\xe9</title>", "latin-1", "caf\u00e9"),
        # The header outranks a <meta> that disagrees with it.
        (b'<meta charset="utf-8"><title>caf\xe9</title>', "ISO-8859-1", "caf\u00e9"),
        (b'<meta charset="iso-8859-1"><title>caf\xc3\xa9</title>', "utf-8", "caf\u00e9"),
        (b"<title>caf\xc3\xa9</title>", None, "caf\u00e9"),
        ("<title>\u65e5\u672c</title>".encode("shift_jis"), "shift_jis", "\u65e5\u672c"),
        # A byte order mark outranks everything.
        ("\ufeff<title>caf\u00e9</title>".encode("utf-16-le"), "latin-1", "caf\u00e9"),
        (b'<?xml version="1.0" encoding="utf-8"?><title>caf\xc3\xa9</title>', None, "caf\u00e9"),
    ],
)
def test_charset(body: bytes, charset: str | None, expected: str) -> None:
    assert extract(body, PAGE, charset=charset).title == expected


@pytest.mark.parametrize(
    "charset", ["no-such-charset", "base64", "rot13", "idna", "punycode", "utf-7", "a\x00b", ""]
)
def test_lying_or_unusable_header_charset_falls_back_to_utf8(charset: str) -> None:
    body = b"<title>caf\xc3\xa9 +ADw-</title>"
    assert extract(body, PAGE, charset=charset).title == "caf\u00e9 +ADw-"


@pytest.mark.parametrize("label", ["no-such-charset", "base64", "utf-7", "unicode-escape"])
def test_lying_meta_charset_falls_back_to_utf8(label: str) -> None:
    body = f'<meta charset="{label}"><title>caf\u00e9</title>'.encode()
    assert extract(body, PAGE).title == "caf\u00e9"


def test_invalid_utf8_is_replaced() -> None:
    result = extract(b'<title>a\xff\xfeb</title><a href="/x">', PAGE, charset="utf-8")
    assert result.title == "a\ufffd\ufffdb"
    assert result.links == ["https://ex.com/x"]
    # Undeclared, the same bytes are taken for a legacy encoding (tests/parse/test_encodings.py).
    assert extract(b"<title>a\xff\xfeb</title>", PAGE).title == "a\xff\xfeb"


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        (None, None),
        ("", None),
        ("text/html", None),
        ("text/html; charset=UTF-8", "utf-8"),
        ('text/html; charset="utf-8"', "utf-8"),
        ("text/html;charset=ISO-8859-1", "cp1252"),  # as browsers read latin-1
        ("text/html; charset=shift_jis", "cp932"),
        ("text/html; charset=bogus", None),
        ("text/html; charset=base64", None),
        ("text/html; charset=utf-7", None),
    ],
)
def test_charset_from_content_type(content_type: str | None, expected: str | None) -> None:
    assert charset_from_content_type(content_type) == expected


EMPTY = Extracted(title=None, links=[], data={"f": None})


@pytest.mark.parametrize("body", [b"", b"   \n", b"<!-- only a comment -->", b"\xef\xbb\xbf"])
def test_empty_page(body: bytes) -> None:
    assert extract(body, PAGE, fields=compile_fields({"f": "p"})) == EMPTY


@pytest.mark.parametrize(
    "body",
    [
        bytes(range(256)) * 100,
        random.Random(0).randbytes(200_000),
        b"\x00" * 10_000,
        b"<" * 50_000 + b">" * 50_000,
        b"<a href='" * 10_000,
        b"\xff\xfe" + b"\x00<" * 1000,
        b"<html>" + b"<title>" * 10_000,
    ],
)
def test_garbage_bytes(body: bytes) -> None:
    result = extract(body, PAGE, fields=compile_fields({"f": "p"}))
    assert isinstance(result, Extracted)
    assert set(result.data) == {"f"}


def test_nul_bytes() -> None:
    body = b"<title>a\x00b</title><p>x\x00y</p><a href='/p\x00q'>l</a><a href='/ok'>"
    result = extract(body, PAGE, fields=compile_fields({"p": "p"}))
    assert result.title == "a\ufffdb"
    assert result.data == {"p": "x\ufffdy"}
    assert "https://ex.com/ok" in result.links


def test_deeply_nested_tags() -> None:
    depth = 100_000
    body = '<title>deep</title><a href="/before">' + "<div>" * depth + "x" + "</div>" * depth
    result = extract(body.encode(), PAGE, fields=compile_fields({"d": "div"}))
    assert result.title == "deep"
    assert result.links == ["https://ex.com/before"]


@settings(max_examples=200, deadline=None)
@given(body=st.binary(), url=st.text(), charset=st.none() | st.text())
def test_never_raises_on_arbitrary_bytes(body: bytes, url: str, charset: str | None) -> None:
    result = extract(body, url, charset=charset, fields=compile_fields({"f": "a"}))
    assert all(link[:8].lower().startswith(("http://", "https://")) for link in result.links)


@settings(max_examples=200, deadline=None)
@given(text=st.text(), url=st.text())
def test_never_raises_on_arbitrary_text(text: str, url: str) -> None:
    result = extract(text.encode("utf-8", "surrogatepass"), url)
    assert result.title is None or len(result.title) <= 1000


@settings(max_examples=200, deadline=None)
@given(
    hrefs=st.lists(st.text(), max_size=5),
    url=st.text() | st.just(PAGE),
)
def test_never_raises_on_arbitrary_hrefs(hrefs: list[str], url: str) -> None:
    body = "".join(f"<base href='{h}'><a href='{h}'>" for h in hrefs)
    result = extract(body.encode("utf-8", "surrogatepass"), url)
    assert len(result.links) == len(set(result.links))


# Bases and href pieces that reach every branch of the joiner's shortcuts and urljoin's own rules.
JOIN_BASES = [
    PAGE,
    "http://ex.com",
    "http://Ex.COM:81/a//b/c?x=1#f",
    "HTTP://ex.com/a/../b/c",
    "http://u:p@ex.com/a/b/",
    "https://[::1]/x",
    "http://h/../../a/./b",
    "https://xn--nxa.com/\u00e9/",
    "ftp://h/a",
    "mailto:x@y",
    "page.html",
    "",
]
HREF_PIECES = [
    "/", "//", ".", "..", "./", "../", "a", "b.html", "?", "#", "x=1", ":", ";", ";p=1", "%2F", "@",
    "http:", "https:", "http://", "https://", "mailto:", "h", "[", "]", "\u00e9", "\uff03", "\t", " ", "\x00",
]  # fmt: skip


@settings(max_examples=3000, deadline=None)
@given(
    base=st.sampled_from(JOIN_BASES),
    href=st.lists(st.sampled_from(HREF_PIECES), min_size=1, max_size=6).map("".join) | st.text(),
)
def test_joining_a_link_is_exactly_urljoin(base: str, href: str) -> None:
    try:
        expected: str | type[ValueError] = urljoin(base, href)
    except ValueError:
        expected = ValueError
    try:
        joined: str | type[ValueError] = _Joiner(base).join(href)
    except ValueError:
        joined = ValueError
    assert joined == expected
