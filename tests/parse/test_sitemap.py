"""The streaming sitemap reader: every kind, gzip by its magic bytes, sitemaps.org's limits with flat
memory, and hostile bodies (bombs, entities, junk) that cost nothing."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import re
import socket
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.errors import CrawlerError, SitemapError
from crawler.parse.sitemaps import (
    MAX_BYTES,
    MAX_DEPTH,
    MAX_URLS,
    SitemapEntry,
    SitemapKind,
    SitemapReader,
    SitemapReport,
    within_depth,
)
from crawler.parse.sitemaps.lastmod import parse_lastmod
from crawler.parse.sitemaps.xml import MAX_QUIET

ROOT = Path(__file__).parents[2]
URL = "https://shop.test/sitemap.xml"
SM = "http://www.sitemaps.org/schemas/sitemap/0.9"
HEAD = f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{SM}">\n'.encode()
MiB = 2**20


def pieces(body: bytes, size: int) -> Iterator[bytes]:
    for start in range(0, len(body), size):
        yield body[start : start + size]


def read(
    body: bytes | Iterable[bytes], size: int = 64 * 1024, url: str = URL
) -> tuple[list[SitemapEntry], SitemapReport]:
    reader = SitemapReader(url)
    chunks = pieces(body, size) if isinstance(body, bytes) else body
    return list(reader.read(chunks)), reader.report


def urlset(n: int, start: int = 0) -> bytes:
    """A urlset of `n` realistic URLs, each with a lastmod."""
    return (
        HEAD
        + b"".join(
            b"<url><loc>https://shop.test/catalogue/widgets/blue-widget-%07d.html?colour=blue</loc>"
            b"<lastmod>2024-03-05T10:30:00+01:00</lastmod></url>\n" % i
            for i in range(start, start + n)
        )
        + b"</urlset>\n"
    )


def locs(entries: list[SitemapEntry]) -> list[str]:
    return [e.loc for e in entries]


URLSET = f"""\ufeff
  <?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="{SM}" xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"
        xmlns:xhtml="http://www.w3.org/1999/xhtml">
  <!-- a comment -->
  <url>
    <loc>
      https://shop.test/a
    </loc>
    <lastmod>2024</lastmod>
    <changefreq>daily</changefreq>
    <image:image><image:loc>https://img.test/a.jpg</image:loc></image:image>
    <xhtml:link rel="alternate" hreflang="de" href="https://shop.test/de/a"/>
  </url>
  <url><loc>https://shop.test/b?x=1&amp;y=2</loc><lastmod>2024-03</lastmod></url>
  <url><loc><![CDATA[https://shop.test/c]]></loc><lastmod>2024-03-05</lastmod></url>
  <url><lastmod>2024-03-05T10:30+01:00</lastmod><loc>/d</loc></url>
  <url><loc>HTTPS://Shop.test:8443/e</loc><lastmod>2024-03-05T10:30:15.5Z</lastmod></url>
  <url><loc>https://shop.test/f</loc><lastmod>2024-03-05T10:30:15</lastmod></url>
  <url><loc>https://shop.test/g</loc><lastmod>last tuesday</lastmod></url>
  <url><loc>ftp://shop.test/h</loc></url>
  <url><loc>https://shop.test/{"i" * 3000}</loc></url>
  <url><loc>https://shop.test:99999/j</loc></url>
  <url><lastmod>2024</lastmod></url>
  <url><loc>  </loc></url>
  <url><loc>https://shop.test/k</loc><lastmod>2024-02-30</lastmod></url>
</urlset>
""".encode()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("size", [1, 13, 64 * 1024])
def test_a_urlset_in_any_chunks_with_its_lastmods(size: int) -> None:
    entries, report = read(URLSET, size)
    assert entries == [
        ("https://shop.test/a", datetime(2024, 1, 1, tzinfo=UTC)),
        ("https://shop.test/b?x=1&y=2", datetime(2024, 3, 1, tzinfo=UTC)),
        ("https://shop.test/c", datetime(2024, 3, 5, tzinfo=UTC)),
        ("https://shop.test/d", datetime(2024, 3, 5, 9, 30, tzinfo=UTC)),  # resolved against the sitemap
        ("HTTPS://Shop.test:8443/e", datetime(2024, 3, 5, 10, 30, 15, 500000, tzinfo=UTC)),
        ("https://shop.test/f", datetime(2024, 3, 5, 10, 30, 15, tzinfo=UTC)),
        ("https://shop.test/g", None),
        ("https://shop.test/k", None),
    ]
    assert all(e.lastmod is None or e.lastmod.tzinfo is UTC for e in entries)
    assert report.kind is SitemapKind.URLSET and report.entries == 8
    assert report.skipped == {"not http(s)": 1, "too long": 1, "bad URL": 1, "no loc": 2}
    assert report.truncated is None and not report.gzip
    assert report.bytes_read == report.bytes_uncompressed == len(URLSET)


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "root",
    [
        '<urlset xmlns="http://www.google.com/schemas/sitemap/0.84">',  # an old namespace
        "<urlset>",  # none
        f'<sm:urlset xmlns:sm="{SM}">',  # a prefix
    ],
)
def test_names_match_whatever_the_namespace(root: str) -> None:
    prefix = "sm:" if root.startswith("<sm:") else ""
    body = (
        f"{root}<{prefix}url><{prefix}loc>https://shop.test/a</{prefix}loc>"
        f"<{prefix}lastmod>2024-01-02</{prefix}lastmod></{prefix}url></{prefix}urlset>"
    )
    entries, report = read(body.encode())
    assert entries == [("https://shop.test/a", datetime(2024, 1, 2, tzinfo=UTC))]
    assert report.kind is SitemapKind.URLSET


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024", datetime(2024, 1, 1, tzinfo=UTC)),
        ("2024-07", datetime(2024, 7, 1, tzinfo=UTC)),
        ("2024-07-16", datetime(2024, 7, 16, tzinfo=UTC)),
        ("2024-07-16T19:20+01:00", datetime(2024, 7, 16, 18, 20, tzinfo=UTC)),
        ("2024-07-16T19:20:30+01:00", datetime(2024, 7, 16, 18, 20, 30, tzinfo=UTC)),
        ("2024-07-16T19:20:30.45+01:00", datetime(2024, 7, 16, 18, 20, 30, 450000, tzinfo=UTC)),
        ("2024-07-16T19:20:30Z", datetime(2024, 7, 16, 19, 20, 30, tzinfo=UTC)),
        (" 2024-07-16T19:20:30-05:00\n", datetime(2024, 7, 17, 0, 20, 30, tzinfo=UTC)),
        ("2024-07-16T19:20:30", datetime(2024, 7, 16, 19, 20, 30, tzinfo=UTC)),  # no offset: UTC
        ("Tue, 16 Jul 2024 19:20:30 GMT", datetime(2024, 7, 16, 19, 20, 30, tzinfo=UTC)),  # RFC 822
        ("Tue, 16 Jul 2024 19:20:30 +0200", datetime(2024, 7, 16, 17, 20, 30, tzinfo=UTC)),
        ("16 Jul 2024 19:20:30 -0000", datetime(2024, 7, 16, 19, 20, 30, tzinfo=UTC)),
        ("2024-13", None),
        ("2024-02-30", None),
        ("0000", None),
        ("0001-01-01T00:00:00+01:00", None),  # before year 1 in UTC
        ("yesterday", None),
        ("", None),
        (None, None),
        ("2024-07-16" + " " * 100, datetime(2024, 7, 16, tzinfo=UTC)),
        ("2" * 100, None),
    ],
)
def test_lastmod_formats(text: str | None, expected: datetime | None) -> None:
    assert parse_lastmod(text) == expected


@pytest.mark.timeout(10)
def test_a_sitemapindex_lists_sitemaps_to_read_in_turn() -> None:
    body = f"""<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="{SM}">
  <sitemap><loc>https://shop.test/sitemap-1.xml.gz</loc><lastmod>2024-03-05</lastmod></sitemap>
  <sitemap><loc>sitemap-2.txt</loc></sitemap>
  <sitemap><loc>javascript:alert(1)</loc></sitemap>
</sitemapindex>""".encode()
    entries, report = read(body, url="https://shop.test/maps/index.xml")
    assert entries == [
        ("https://shop.test/sitemap-1.xml.gz", datetime(2024, 3, 5, tzinfo=UTC)),
        ("https://shop.test/maps/sitemap-2.txt", None),
    ]
    assert report.kind is SitemapKind.INDEX and report.skipped == {"not http(s)": 1}
    # Named by robots.txt: depth 0; each index level adds one; deeper than MAX_DEPTH is not read.
    assert MAX_DEPTH == 3
    assert [within_depth(d) for d in range(-1, 5)] == [False, True, True, True, True, False]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("size", [1, 3, 1000])
def test_gzip_is_told_by_its_magic_bytes_fed_in_small_chunks(size: int) -> None:
    body = urlset(300)
    packed = gzip.compress(body)
    entries, report = read(packed, size, url="https://shop.test/sitemap")  # no .gz in the name
    assert len(entries) == 300 and entries[-1].loc.endswith("0000299.html?colour=blue")
    assert report.gzip and report.truncated is None
    assert report.bytes_read == len(packed) and report.bytes_uncompressed == len(body)
    assert report.summary() == (
        f"https://shop.test/sitemap: urlset, 300 entries, skipped none, {len(body)} bytes "
        f"({len(packed)} gzipped)"
    )
    # Members one after another (RFC 1952) make one body; what follows the last one is ignored.
    halves = gzip.compress(body[:5000]) + gzip.compress(body[5000:]) + b"\r\n"
    again, report = read(halves, size)
    assert again == entries and report.truncated is None


@pytest.mark.timeout(10)
def test_a_gzip_stream_cut_short_keeps_what_came_and_says_so() -> None:
    packed = gzip.compress(urlset(300))
    entries, report = read(packed[: len(packed) // 2])
    assert 0 < len(entries) < 300
    assert report.truncated is not None and report.truncated.startswith("gzip stream cut short after ")
    packed = gzip.compress(urlset(2000))
    entries, report = read(packed[:-8] + bytes(8))  # a wrong CRC-32 and length, found at the end
    assert 1000 < len(entries) < 2000
    assert report.truncated is not None and report.truncated.startswith("gzip data corrupt after ")


TEXT = (
    b"\xef\xbb\xbfhttps://shop.test/a\r\n"
    b"\n"
    b"   https://shop.test/b   \n"
    b"# a comment, which the format does not have\n"
    b"/relative\n"
    b"https://shop.test/\xff\xfe\n"
    b"https://shop.test/" + b"x" * 10_000 + b"\n"
    b"mailto:someone@shop.test\n"
    b"https://shop.test/caf\xc3\xa9\n"
    b"\t\n"
    b"HTTP://SHOP.TEST/c"
)


@pytest.mark.timeout(30)
@pytest.mark.parametrize("size", [1, 7, 64 * 1024])
def test_a_text_sitemap_one_url_a_line(size: int) -> None:
    entries, report = read(TEXT, size, url="https://shop.test/sitemap.txt")
    assert entries == [
        ("https://shop.test/a", None),
        ("https://shop.test/b", None),
        ("https://shop.test/café", None),
        ("HTTP://SHOP.TEST/c", None),
    ]
    assert report.kind is SitemapKind.TEXT and report.truncated is None
    assert report.skipped == {"not absolute": 2, "not UTF-8": 1, "too long": 1, "not http(s)": 1}
    entries, report = read(gzip.compress(TEXT), size)
    assert len(entries) == 4 and report.gzip


RSS = b"""<?xml version="1.0"?>
<rss version="2.0" xmlns:atom="http://www.w3.org/2005/Atom">
<channel>
  <title>Shop news</title>
  <link>https://shop.test/</link>
  <atom:link href="https://shop.test/feed.xml" rel="self" type="application/rss+xml"/>
  <item><title>A</title><link>https://shop.test/news/a</link>
    <pubDate>Tue, 05 Mar 2024 10:30:00 GMT</pubDate></item>
  <item><title>B</title><link> https://shop.test/news/b </link><pubDate>soon</pubDate></item>
  <item><title>C, a link-less item</title><guid>c</guid></item>
  <item><atom:link href="https://shop.test/news/d"/><pubDate>Wed, 06 Mar 2024 00:00:00 +0100</pubDate></item>
</channel>
</rss>"""

RDF = b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#" xmlns="http://purl.org/rss/1.0/"
         xmlns:dc="http://purl.org/dc/elements/1.1/">
  <channel rdf:about="https://shop.test/"><link>https://shop.test/</link></channel>
  <item rdf:about="https://shop.test/news/a"><link>https://shop.test/news/a</link>
    <dc:date>2024-03-05T10:30:00Z</dc:date></item>
</rdf:RDF>"""


@pytest.mark.timeout(10)
def test_rss_items_are_the_entries_and_pubdate_their_lastmod() -> None:
    entries, report = read(RSS, 50, url="https://shop.test/feed.xml")
    assert entries == [
        ("https://shop.test/news/a", datetime(2024, 3, 5, 10, 30, tzinfo=UTC)),
        ("https://shop.test/news/b", None),
        ("https://shop.test/news/d", datetime(2024, 3, 5, 23, 0, tzinfo=UTC)),
    ]
    assert report.kind is SitemapKind.RSS and report.skipped == {"no loc": 1}
    entries, report = read(RDF)
    assert entries == [("https://shop.test/news/a", datetime(2024, 3, 5, 10, 30, tzinfo=UTC))]
    assert report.kind is SitemapKind.RSS


ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>Shop</title>
  <link href="https://shop.test/"/>
  <link rel="self" href="https://shop.test/atom.xml"/>
  <updated>2024-03-06T00:00:00Z</updated>
  <entry>
    <title>A</title>
    <link rel="self" href="https://shop.test/api/a.json"/>
    <link rel="alternate" type="text/html" href="https://shop.test/news/a"/>
    <published>2024-01-01T00:00:00Z</published>
    <updated>2024-03-05T10:30:00+02:00</updated>
  </entry>
  <entry><link href="/news/b"/><published>2024-01-02T00:00:00Z</published></entry>
  <entry><link rel="edit" href="https://shop.test/edit/c"/></entry>
</feed>"""


@pytest.mark.timeout(10)
def test_atom_entries_are_their_alternate_links_and_updated_their_lastmod() -> None:
    entries, report = read(ATOM, 64, url="https://shop.test/atom.xml")
    assert entries == [
        ("https://shop.test/news/a", datetime(2024, 3, 5, 8, 30, tzinfo=UTC)),
        ("https://shop.test/news/b", datetime(2024, 1, 2, tzinfo=UTC)),
    ]
    assert report.kind is SitemapKind.ATOM and report.skipped == {"no loc": 1}


@pytest.mark.timeout(10)
def test_declared_and_utf16_encodings_are_read() -> None:
    body = '<?xml version="1.0" encoding="ISO-8859-1"?><urlset><url><loc>https://shop.test/café</loc></url></urlset>'
    assert locs(read(body.encode("latin-1"))[0]) == ["https://shop.test/café"]
    body = body.replace("ISO-8859-1", "UTF-16")
    assert locs(read(body.encode("utf-16"), 5)[0]) == ["https://shop.test/café"]


BOMB_HEAD = HEAD + b"<url><loc>https://shop.test/1</loc></url>\n"


def bomb_stream(total: int, block: bytes, head: bytes = BOMB_HEAD, size: int = 16 * 1024) -> Iterator[bytes]:
    """`head` then `total` bytes of `block`s, gzipped as they are read (a GiB of comments or zeros is
    ~1 MB gzipped: the test does not compress what the reader never asks for)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    yield deflate.compress(head)
    for _ in range(total // len(block)):
        yield from pieces(deflate.compress(block), size)
    yield from pieces(deflate.flush(), size)


class Counted:
    """Chunks, counting what the reader took."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self.chunks = chunks
        self.taken = 0
        self.exhausted = False

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.chunks:
            self.taken += len(chunk)
            yield chunk
        self.exhausted = True


SKIPPED = b"<url><loc>https://shop.test/" + b"x" * 3000 + b"</loc></url>\n"  # too long: skipped
PADDING = SKIPPED * (MiB // len(SKIPPED))  # about 1 MiB of entries, none of which counts to 50,000


@pytest.mark.timeout(60)
def test_a_gzip_bomb_stops_at_the_cap_in_flat_memory() -> None:
    stream = Counted(bomb_stream(2**30, PADDING))
    tracemalloc.start()
    try:
        entries, report = read(stream)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert locs(entries) == ["https://shop.test/1"]
    assert report.skipped["too long"] > 15_000
    assert report.truncated == f"more than {MAX_BYTES} bytes uncompressed"
    assert report.bytes_uncompressed == MAX_BYTES == 50 * MiB
    assert report.gzip and report.bytes_read == stream.taken < MiB and not stream.exhausted
    assert peak < 20 * MiB, peak


@pytest.mark.timeout(60)
def test_a_bomb_of_zeros_is_no_sitemap_and_costs_nothing() -> None:
    stream = Counted(bomb_stream(2**30, bytes(MiB), head=b""))
    with pytest.raises(SitemapError, match="neither XML nor a list of URLs"):
        read(stream)
    assert not stream.exhausted and stream.taken < MiB


def quiet_stretches() -> dict[str, Iterator[bytes]]:
    """Bodies where no element starts or ends for long: libxml2 would hold such a token whole."""
    dtd = b"".join(b'<!ENTITY e%06d "%s">' % (i, b"x" * 1000) for i in range(1024))
    return {
        "dtd": bomb_stream(50 * MiB, dtd, head=b'<?xml version="1.0"?><!DOCTYPE urlset ['),
        "comments": bomb_stream(50 * MiB, b"<!--" + b"x" * (MiB - 7) + b"-->"),
        "start tag": bomb_stream(50 * MiB, b" a%d='x'" * 100_000, head=BOMB_HEAD + b"<url"),
        "text": bomb_stream(50 * MiB, b"x" * MiB, head=BOMB_HEAD + b"<url><loc>https://shop.test/"),
    }


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(quiet_stretches()))
def test_a_megabyte_without_an_element_stops_the_reading(name: str) -> None:
    stream = Counted(quiet_stretches()[name])
    if name == "dtd":
        with pytest.raises(SitemapError, match=r"no root element in its first (\d+) bytes") as caught:
            read(stream)
        why = str(caught.value)
    else:
        entries, report = read(stream)
        assert locs(entries) == ["https://shop.test/1"]
        assert report.truncated is not None
        assert re.fullmatch(r"no element starts or ends in \d+ bytes, after 1 entries", report.truncated)
        why = report.truncated
    quiet = int(re.findall(r"\d+ bytes", why)[0].split()[0])
    assert MAX_QUIET < quiet <= MAX_QUIET + 64 * 1024  # give or take a piece
    assert stream.taken < 100_000 and not stream.exhausted


@pytest.mark.timeout(120)
def test_hostile_sitemaps_hold_no_memory_outside_python_either() -> None:
    # tracemalloc sees Python's allocations, not libxml2's: the process's peak RSS sees both.
    script = textwrap.dedent(
        """
        import contextlib
        from crawler.errors import SitemapError
        from tests.parse.test_sitemap import PADDING, bomb_stream, quiet_stretches, read, urlset

        def peak_kb():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])

        read(urlset(100))
        before = peak_kb()
        entries, report = read(bomb_stream(2**30, PADDING))
        assert report.truncated and len(entries) == 1, report
        for stream in quiet_stretches().values():
            with contextlib.suppress(SitemapError):
                read(stream)
        print(before, peak_kb())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=100, check=True
    )
    before, after = map(int, done.stdout.split())
    assert after - before < 20 * 1024, (before, after)


@pytest.mark.timeout(60)
def test_a_50001_url_sitemap_yields_50000_in_flat_memory() -> None:
    packed = gzip.compress(urlset(MAX_URLS + 1))
    stream = Counted(pieces(packed, 64 * 1024))
    tracemalloc.start()
    try:
        reader = SitemapReader(URL)
        count = sum(1 for _ in reader.read(stream))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == MAX_URLS == 50_000
    assert reader.report.entries == MAX_URLS and reader.report.truncated == "more than 50000 URLs"
    assert reader.done
    # 50,000 URLs held would be ~10 MB; a 64 KiB piece and the parser's state are what is.
    assert peak < 2 * MiB, peak


@pytest.mark.timeout(30)
def test_entities_are_not_expanded_nor_files_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    dtd = tmp_path / "evil.dtd"
    dtd.write_text(f'<!ENTITY leak SYSTEM "file://{secret}">')
    laughs = '<!ENTITY lol0 "lollollollollollollollollollol">' + "".join(
        f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)
    )
    doctype = (
        f'<!DOCTYPE urlset [{laughs}<!ENTITY xxe SYSTEM "file://{secret}">'
        f'<!ENTITY % remote SYSTEM "file://{dtd}"> %remote;]>'
    )
    ok_url = "<url><loc>https://shop.test/ok</loc></url>"
    ok_entry = '<entry><link href="https://shop.test/ok"/></entry>'
    for body in [
        f"{doctype}<urlset><url><loc>https://shop.test/&xxe;</loc></url>{ok_url}</urlset>",
        f"{doctype}<urlset><url><loc>&leak;</loc></url>{ok_url}</urlset>",
        f"{doctype}<urlset>{ok_url}<url><loc>&lol9;</loc></url></urlset>",
        f'{doctype}<feed>{ok_entry}<entry><link href="&lol9;"/></entry></feed>',
        f'{doctype}<feed>{ok_entry}<entry><link href="&xxe;"/></entry></feed>',
    ]:
        tracemalloc.start()
        try:
            entries, report = read(body.encode())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert locs(entries) == ["https://shop.test/ok"], report
        assert "TOPSECRET" not in repr(report) and "lollol" not in repr(report)
        assert peak < 2 * MiB
        # Either the entry is skipped, or libxml2 refuses the document there (and that is reported).
        assert report.skipped == {"entity or markup in loc": 1} or report.truncated, report


@pytest.mark.timeout(10)
def test_no_dtd_or_entity_is_fetched_over_the_network() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        where = f"http://127.0.0.1:{server.getsockname()[1]}"
        body = (
            f'<?xml version="1.0"?><!DOCTYPE urlset SYSTEM "{where}/a.dtd" [<!ENTITY e SYSTEM "{where}/e">'
            f'<!ENTITY % p SYSTEM "{where}/p.dtd"> %p;]>'
            "<urlset><url><loc>&e;</loc></url><url><loc>https://shop.test/ok</loc></url></urlset>"
        )
        entries, report = read(body.encode())
        assert locs(entries) == ["https://shop.test/ok"] and report.skipped == {"entity or markup in loc": 1}
        with pytest.raises(BlockingIOError):
            server.accept()


@pytest.mark.timeout(30)
@pytest.mark.parametrize("size", [1, 50, 64 * 1024])
def test_malformed_xml_halfway_keeps_what_came_before_and_says_so(size: int) -> None:
    body = HEAD + (
        b"<url><loc>https://shop.test/1</loc></url><url><loc>https://shop.test/2</loc></url>"
        b"<url><loc>https://shop.test/3</lo></url><url><loc>https://shop.test/4</loc></url></urlset>"
    )
    entries, report = read(body, size)
    assert locs(entries) == ["https://shop.test/1", "https://shop.test/2"]
    assert report.kind is SitemapKind.URLSET and report.truncated is not None
    assert report.truncated.startswith("malformed XML after 2 entries (0 skipped): Opening and ending tag")
    # An unfinished document is reported the same way.
    entries, report = read(urlset(10)[:-30])
    assert len(entries) == 9 and report.truncated and "malformed XML after 9 entries" in report.truncated


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "the body is empty"),
        (b" \r\n\t ", "the body is empty"),
        (gzip.compress(b""), "the body is empty"),
        (b"\xef\xbb\xbf", "the body is empty"),
        (b"<!DOCTYPE html><html><head><title>Shop</title></head><body></body></html>", r"root is <html>"),
        (b"<!DOCTYPE html><html lang=en><body>", "not well-formed XML"),
        (b'<?xml version="1.0"?><x:catalog xmlns:x="x"><item/></x:catalog>', r"root is <catalog>.*<urlset>"),
        (b'{"urls": ["https://shop.test/a"]}', "neither XML nor a list of URLs"),
        (b"Page not found\nhttps://shop.test/a\n", "its first line begins 'Page not found'"),
        (bytes(range(256)) * 10, "neither XML nor a list of URLs"),
        (b"\x1f\x8b" + b"garbage" * 10, "not a sitemap, gzip data corrupt"),
        (b"\x1f\x8b\x08\x00garbage", "not a sitemap, gzip stream cut short after 0 bytes"),
        (b"<", "not well-formed XML"),
    ],
)
def test_junk_is_no_sitemap(body: bytes, message: str) -> None:
    with pytest.raises(SitemapError, match=message) as caught:
        read(body, 3)
    assert isinstance(caught.value, CrawlerError)
    assert caught.value.args[0].startswith(f"{URL}: not a sitemap")


@pytest.mark.timeout(10)
def test_chunks_pushed_one_by_one_give_the_same_and_say_when_to_stop() -> None:
    body = gzip.compress(urlset(30))
    reader = SitemapReader(URL, max_urls=20)
    pushed: list[SitemapEntry] = []
    fed = 0
    for chunk in pieces(body, 10):
        pushed.extend(reader.feed(chunk))
        fed += 1
        if reader.done:
            break
    pushed.extend(reader.close())
    assert pushed == read(urlset(20))[0]
    assert reader.report.truncated == "more than 20 URLs" and fed < len(body) // 10
    assert list(reader.feed(b"more")) == [] and list(reader.close()) == []


@pytest.mark.timeout(60)
@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(min_value=1, max_value=len(URLSET)), max_size=20), packed=st.booleans())
def test_where_the_chunks_are_cut_does_not_matter(cuts: list[int], packed: bool) -> None:
    body = gzip.compress(URLSET) if packed else URLSET
    edges = [0, *sorted(c % (len(body) + 1) for c in cuts), len(body)]
    chunks = [body[a:b] for a, b in itertools.pairwise(edges)]
    assert read(chunks) == read(body)


@pytest.mark.timeout(60)
@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
def test_any_bytes_give_entries_or_a_sitemap_error(body: bytes) -> None:
    for start in (b"", HEAD, b"https://shop.test/\n"):
        with contextlib.suppress(SitemapError):
            read(start + body, 7)
