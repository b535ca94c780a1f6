"""The parser: links, title and per-domain fields out of an HTML page, via lxml.

The field language is crawler/parse/fields.py, structured data crawler/parse/structured.py.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from urllib.parse import urljoin, urlsplit

from charset_normalizer import from_bytes
from lxml import etree
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
    to_unicode,
)

from crawler.parse.fields import Fields, compile_fields, extract_fields
from crawler.parse.structured import extract_structured

__all__ = ["Extracted", "Fields", "charset_from_content_type", "compile_fields", "extract"]

MAX_HREF = 4096
MAX_TITLE = 1000
DETECT_BYTES = 64 * 1024  # enough text to tell an encoding; detection costs ~1 ms per 30 KB

# Codecs a hostile charset label could pick to smuggle markup, burn CPU or always fail.
_UNSAFE_CODECS = frozenset(
    {"idna", "punycode", "unicode-escape", "raw-unicode-escape", "undefined", "utf-7"},
)
_LINKS = etree.XPath("//a/@href | //area/@href", smart_strings=False)
_BASE = etree.XPath("string((//base[@href])[1]/@href)", smart_strings=False)
_TITLE = etree.XPath("string((//title)[1])", smart_strings=False)
# An href that urljoin copies through unchanged: no whitespace or control characters (which it strips),
# no brackets (which it validates), no path parameters (";", which it splits off), no empty query or
# fragment (which it drops).
_PLAIN_HREF = re.compile(r"([^\x00-\x20\x7f\[\];?#]*)(?:\?[^\x00-\x20\x7f#]+)?(?:#[^\x00-\x20\x7f]+)?")


@dataclass(frozen=True, slots=True)
class Extracted:
    """What a page yields: its title, its absolute http(s) links and its domain's fields.

    `root` is the parsed tree (None if the body was no HTML), for a parse hook.
    """

    title: str | None
    links: list[str]
    data: dict[str, Any]
    root: etree._Element | None = field(default=None, repr=False, compare=False)
    base: str = field(default="", repr=False, compare=False)  # the URL relative links resolve against


@lru_cache(maxsize=256)  # a site sends the same header with every page
def charset_from_content_type(content_type: str | None) -> str | None:
    """The Python codec named by a Content-Type header's charset, or None if absent or unusable."""
    label = http_content_type_encoding(content_type)
    return _codec(label) if label else None


def extract(
    body: bytes,
    url: str,
    *,
    charset: str | None = None,
    fields: Fields | None = None,
    max_links: int = 5000,
    structured: Sequence[str] = (),
) -> Extracted:
    """Parse `body` fetched from `url`; never raises on malformed or hostile input."""
    fields = fields or {}
    root = _parse(body, charset)
    if root is None:
        return Extracted(title=None, links=[], data={name: f.default for name, f in fields.items()})
    base = _base(root, url)
    data = extract_fields(root, base, fields) if fields else {}
    if structured:
        data["structured"] = extract_structured(root, base, structured)
    return Extracted(
        title=_normalise(_TITLE(root), MAX_TITLE),
        links=_links(root, base, max_links),
        data=data,
        root=root,
        base=base,
    )


@lru_cache(maxsize=256)
def _codec(label: str) -> str | None:
    try:
        # w3lib maps labels the way browsers do (latin-1 -> cp1252) and refuses utf-7.
        name = resolve_encoding(label)
        info = codecs.lookup(name) if name else None
    except (LookupError, ValueError):  # ValueError: a NUL in the label
        return None
    if info is None or info.name in _UNSAFE_CODECS or not info._is_text_encoding:
        return None
    return info.name


def _parse(body: bytes, charset: str | None) -> etree._Element | None:
    # A byte order mark outranks the header, as in browsers.
    encoding, bom = read_bom(body)
    if encoding and bom:
        body = body[len(bom) :]
    else:
        encoding = (charset and _codec(charset)) or _declared(body)
    data: bytes | None = None
    if encoding in (None, "utf-8"):
        try:
            body.decode("utf-8")
            data = body  # valid UTF-8 as it is: no decoding and re-encoding
        except UnicodeDecodeError:
            # Undeclared and not UTF-8: a legacy encoding, found by detection.
            encoding = encoding or _detect(body) or "utf-8"
    if data is None:
        try:
            text = to_unicode(body, encoding or "utf-8")
        except (LookupError, UnicodeError):
            text = body.decode("utf-8", "replace")
        data = text.encode("utf-8")
    # Re-encoding lets lxml parse a known encoding, ignoring lying <meta> or <?xml?> declarations.
    # A parser per call costs ~1 us and is never shared between threads.
    parser = etree.HTMLParser(
        encoding="utf-8",
        recover=True,
        remove_comments=True,
        remove_pis=True,
        huge_tree=False,
        no_network=True,
        collect_ids=False,  # nothing looks up ids; hashing them is wasted time
    )
    try:
        return etree.fromstring(data, parser)
    except (etree.LxmlError, ValueError):
        return None


def _detect(body: bytes) -> str | None:
    """The legacy encoding of an undeclared page that is not UTF-8, by charset-normalizer."""
    matches = from_bytes(body[:DETECT_BYTES])
    best = matches.best()
    if best is None:
        return None
    # Western single-byte text fits cp1250, cp1252 and cp1257 about equally (the accented letters
    # are the few bytes that differ); cp1252 is by far the web's commonest, and what browsers
    # fall back to, so a near-tie goes to it.
    for match in matches:
        if match.encoding == "cp1252" and match.chaos <= best.chaos + 0.05:
            return "cp1252"
    return _codec(best.encoding)


def _declared(body: bytes) -> str | None:
    label = html_body_declared_encoding(body)
    return _codec(label) if label else None


def _base(root: etree._Element, url: str) -> str:
    joined: str
    if href := _BASE(root).strip():
        try:
            joined = urljoin(url, href)
        except ValueError:
            joined = ""
        if _is_http(joined):
            return joined
    return url


def _links(root: etree._Element, base: str, max_links: int) -> list[str]:
    join = _Joiner(base).join
    tried: set[str] = set()
    links: dict[str, None] = {}
    for raw in _LINKS(root):
        if len(links) >= max_links:
            break
        href = raw.strip()
        if href in tried or len(href) > MAX_HREF:
            continue
        tried.add(href)
        try:
            link = join(href)
        except ValueError:  # e.g. an unbalanced IPv6 bracket
            continue
        if _is_http(link):
            links[link] = None
    return list(links)


class _Joiner:
    """urljoin against one page's URL, with the prefix work done once for the page.

    Joining ~40 links per page was most of extraction's cost; the common spellings (a full URL, an
    absolute path, a plain relative path) are a concatenation once the page's origin and directory are
    known. Anything else goes to urljoin, so the result is always exactly urljoin's.
    """

    __slots__ = ("_base", "_directory", "_origin", "_scheme")

    def __init__(self, base: str) -> None:
        self._base = base
        self._directory: str | None = None
        try:
            parts = urlsplit(base)
            if parts.scheme not in ("http", "https"):
                return  # urljoin treats other schemes its own ways
            self._directory = urljoin(base, "./")
        except ValueError:
            return
        self._scheme = f"{parts.scheme}://"
        self._origin = f"{parts.scheme}://{parts.netloc}"

    def join(self, href: str) -> str:
        """urljoin(base, href); ValueError where urljoin raises one."""
        plain = _PLAIN_HREF.fullmatch(href)
        if plain is None or self._directory is None:
            return urljoin(self._base, href)
        path = plain[1]
        if path.startswith(self._scheme):
            # The page's scheme and a host: urljoin takes the URL as it is, without resolving its path.
            # (A non-ASCII host is checked by urljoin against look-alike delimiters.)
            if len(path) > len(self._scheme) and path[len(self._scheme)] != "/" and path.isascii():
                return href
        elif "//" in path or "/." in path or path.startswith(".") or not path:
            pass  # empty segments, dot segments, a network-path reference or no path: urljoin's work
        elif path[0] == "/":
            return self._origin + href
        elif ":" not in path.partition("/")[0]:  # a colon there would make it a scheme
            return self._directory + href
        return urljoin(self._base, href)


def _is_http(url: str) -> bool:
    # urljoin keeps the scheme's case when it differs from the base's.
    return url[:8].lower().startswith(("http://", "https://"))


def _normalise(text: str, limit: int) -> str | None:
    return " ".join(text.split())[:limit].rstrip() or None
