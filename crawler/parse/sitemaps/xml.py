"""XML sitemaps (urlset, sitemapindex) and the feeds used as sitemaps (RSS 2.0 and 1.0, Atom), pulled
through lxml a piece at a time.

Names are matched by their local part, whatever the namespace (sites get sitemaps.org's wrong, or
leave it out). Each element is cleared at its end and its ended siblings dropped, so the tree never
holds more than the open path. libxml2 holds a token whole until it ends (a start tag, a text, a DTD),
so reading stops where no element starts or ends for MAX_QUIET bytes: memory stays flat. The parser
resolves no entity, loads no DTD and reaches no network: a billion-laughs or external-entity sitemap
is harmless.
"""

from __future__ import annotations

from collections.abc import Iterator

from lxml import etree

from crawler.errors import SitemapError
from crawler.parse.sitemaps.locs import NO_LOC
from crawler.parse.sitemaps.report import SitemapKind, SitemapReport

_KINDS = {
    "urlset": (SitemapKind.URLSET, "url"),
    "sitemapindex": (SitemapKind.INDEX, "sitemap"),
    "rss": (SitemapKind.RSS, "item"),
    "RDF": (SitemapKind.RSS, "item"),  # RSS 1.0
    "feed": (SitemapKind.ATOM, "entry"),
}
# An entry's location and its dates, by kind; of the dates, the first one named wins.
_LOC = {
    SitemapKind.URLSET: "loc",
    SitemapKind.INDEX: "loc",
    SitemapKind.RSS: "link",
    SitemapKind.ATOM: "link",
}
_DATES = {
    SitemapKind.URLSET: ("lastmod",),
    SitemapKind.INDEX: ("lastmod",),
    SitemapKind.RSS: ("pubDate", "date"),  # RSS 1.0 dates by Dublin Core's dc:date
    SitemapKind.ATOM: ("updated", "published"),
}
MARKUP_IN_LOC = "entity or markup in loc"
# A sitemap has an element every hundred bytes or so; a megabyte without one is an attack or junk.
MAX_QUIET = 1024 * 1024


def _parser() -> etree.XMLPullParser:
    return etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,  # keeps libxml2's limits on depth and text size
        remove_comments=True,
        remove_pis=True,
    )


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


class XmlEntries:
    """Feeds XML in, yields each entry's (location, date text); notes skipped entries and a break."""

    def __init__(self, report: SitemapReport) -> None:
        self._report = report
        self._parser = _parser()
        self._depth = 0
        self._entry_name = ""
        self._entry_depth = 0  # 0: not inside an entry
        self._loc_name = ""
        self._dates: tuple[str, ...] = ()
        self._loc: str | None = None
        self._markup = False
        self._date: str | None = None
        self._date_rank = 0
        self._quiet = 0  # bytes fed since the last element started or ended (give or take a piece)

    def feed(self, data: bytes) -> Iterator[tuple[str, str | None]]:
        """The entries that end within `data`."""
        self._quiet += len(data)
        try:
            self._parser.feed(data)
        except etree.XMLSyntaxError as exc:
            yield from self._events()
            self._broken(exc)
            return
        yield from self._events()
        if self._quiet > MAX_QUIET:
            self._stalled()

    def close(self) -> Iterator[tuple[str, str | None]]:
        """The entries left once the input has ended; notes a document that does not end well."""
        try:
            self._parser.close()
        except etree.XMLSyntaxError as exc:
            # lxml ends the elements left open when a document stops short: those ends are not the
            # document's, and an entry they close may be cut (a half `loc`), so none of them is read.
            self._broken(exc)
        else:
            yield from self._events()

    def _broken(self, exc: etree.XMLSyntaxError) -> None:
        report = self._report
        if report.kind is None:
            raise SitemapError(f"{report.url[:200]}: not a sitemap, not well-formed XML ({exc})") from None
        skipped = sum(report.skipped.values())
        report.truncate(f"malformed XML after {report.entries} entries ({skipped} skipped): {exc}")

    def _stalled(self) -> None:
        report = self._report
        if report.kind is None:
            raise SitemapError(
                f"{report.url[:200]}: not a sitemap, no root element in its first {self._quiet} bytes"
            )
        report.truncate(f"no element starts or ends in {self._quiet} bytes, after {report.entries} entries")

    def _events(self) -> Iterator[tuple[str, str | None]]:
        for action, element in self._parser.read_events():
            self._quiet = 0
            if action == "start":
                self._depth += 1
                if self._depth == 1:
                    self._root(element)
                elif not self._entry_depth and _local(element.tag) == self._entry_name:
                    self._entry_depth = self._depth
                    self._loc, self._markup, self._date, self._date_rank = None, False, None, len(self._dates)
                continue
            if self._entry_depth:
                if self._depth == self._entry_depth + 1:
                    self._field(element)
                elif self._depth == self._entry_depth:
                    self._entry_depth = 0
                    if self._loc is not None:
                        yield self._loc, self._date
                    else:
                        self._report.skip(MARKUP_IN_LOC if self._markup else NO_LOC)
            self._depth -= 1
            if self._depth:
                element.clear(keep_tail=False)
                # Ended siblings go; this one stays while libxml2 may still append to its parent.
                while (previous := element.getprevious()) is not None:
                    parent = element.getparent()
                    assert parent is not None
                    parent.remove(previous)

    def _root(self, element: etree._Element) -> None:
        name = _local(element.tag)
        if name not in _KINDS:
            known = ", ".join(f"<{k}>" for k in _KINDS)
            raise SitemapError(
                f"{self._report.url[:200]}: not a sitemap, an XML document whose root is <{name[:80]}> "
                f"(a sitemap's is one of {known})"
            )
        kind, self._entry_name = _KINDS[name]
        self._report.kind = kind
        self._loc_name, self._dates = _LOC[kind], _DATES[kind]

    def _field(self, element: etree._Element) -> None:
        name = _local(element.tag)
        if name == self._loc_name and self._loc is None:
            if len(element):  # an entity left unresolved, or markup: the text is not the whole
                self._markup = True
            elif element.text and element.text.strip():
                self._loc = element.text
            elif name == "link" and element.get("rel", "alternate") == "alternate":
                self._loc = element.get("href")  # Atom's link, or an atom:link in an RSS item
        elif name in self._dates:
            rank = self._dates.index(name)
            if rank < self._date_rank and not len(element):
                self._date, self._date_rank = element.text, rank
