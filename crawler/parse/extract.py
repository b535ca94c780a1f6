"""The parser: links, title and per-domain fields out of an HTML page, via lxml."""

from __future__ import annotations

import codecs
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TypeAlias
from urllib.parse import urljoin, urlsplit

from cssselect import HTMLTranslator, SelectorError
from lxml import etree
from w3lib.encoding import (
    html_body_declared_encoding,
    http_content_type_encoding,
    read_bom,
    resolve_encoding,
    to_unicode,
)

Fields: TypeAlias = Mapping[str, etree.XPath]

MAX_HREF = 4096
MAX_TITLE = 1000
MAX_FIELD = 10_000

# Codecs a hostile charset label could pick to smuggle markup, burn CPU or always fail.
_UNSAFE_CODECS = frozenset(
    {"idna", "punycode", "unicode-escape", "raw-unicode-escape", "undefined", "utf-7"},
)
_LINKS = etree.XPath("//a/@href | //area/@href", smart_strings=False)
_BASE = etree.XPath("string((//base[@href])[1]/@href)", smart_strings=False)
_TITLE = etree.XPath("string((//title)[1])", smart_strings=False)
_TEXT = etree.XPath("string()", smart_strings=False)
_TRANSLATOR = HTMLTranslator()
# An href that urljoin copies through unchanged: no whitespace or control characters (which it strips),
# no brackets (which it validates), no path parameters (";", which it splits off), no empty query or
# fragment (which it drops).
_PLAIN_HREF = re.compile(r"([^\x00-\x20\x7f\[\];?#]*)(?:\?[^\x00-\x20\x7f#]+)?(?:#[^\x00-\x20\x7f]+)?")


@dataclass(frozen=True, slots=True)
class Extracted:
    """What a page yields: its title, its absolute http(s) links and its domain's fields."""

    title: str | None
    links: list[str]
    data: dict[str, str | None]


def compile_fields(fields: Mapping[str, str]) -> Fields:
    """Compile a CSS selector per field; raise ValueError naming the field if one is invalid."""
    compiled = {}
    for name, selector in fields.items():
        try:
            # Wrapping in (...)[1] lets libxml2 stop at the first match.
            xpath = f"({_TRANSLATOR.css_to_xpath(selector)})[1]"
            compiled[name] = etree.XPath(xpath, smart_strings=False)
        except (SelectorError, etree.XPathError, TypeError) as exc:
            raise ValueError(f"field {name!r}: invalid CSS selector {selector!r}: {exc}") from exc
    return compiled


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
) -> Extracted:
    """Parse `body` fetched from `url`; never raises on malformed or hostile input."""
    fields = fields or {}
    root = _parse(body, charset)
    if root is None:
        return Extracted(title=None, links=[], data=dict.fromkeys(fields))
    return Extracted(
        title=_normalise(_TITLE(root), MAX_TITLE),
        links=_links(root, url, max_links),
        data={name: _field(root, xpath) for name, xpath in fields.items()},
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
        encoding = (charset and _codec(charset)) or _declared(body) or "utf-8"
    try:
        text = to_unicode(body, encoding)
    except (LookupError, UnicodeError):
        text = body.decode("utf-8", "replace")
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
        return etree.fromstring(text.encode("utf-8"), parser)
    except (etree.LxmlError, ValueError):
        return None


def _declared(body: bytes) -> str | None:
    label = html_body_declared_encoding(body)
    return _codec(label) if label else None


def _links(root: etree._Element, url: str, max_links: int) -> list[str]:
    base = url
    if href := _BASE(root).strip():
        try:
            joined = urljoin(url, href)
        except ValueError:
            joined = ""
        if _is_http(joined):
            base = joined
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


def _field(root: etree._Element, xpath: etree.XPath) -> str | None:
    try:
        found = xpath(root)
    except etree.XPathError:
        return None
    # Only an element has text; a caller's own XPath may yield strings or numbers.
    if not isinstance(found, list) or not found or not isinstance(found[0], etree._Element):
        return None
    return _normalise(_TEXT(found[0]), MAX_FIELD)


def _is_http(url: str) -> bool:
    # urljoin keeps the scheme's case when it differs from the base's.
    return url[:8].lower().startswith(("http://", "https://"))


def _normalise(text: str, limit: int) -> str | None:
    return " ".join(text.split())[:limit].rstrip() or None
