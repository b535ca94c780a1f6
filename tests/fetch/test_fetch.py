"""The fetch layer against a hostile server on loopback: bombs, trickles, redirects, private targets.

Redirects are followed here with `follow` (as robots.txt is); a page's redirect is routed instead
(tests/test_redirects.py), and a single fetch returns it as it is.
"""

from __future__ import annotations

import gzip
import random
import socket
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import brotli
import pytest

from crawler.config import CrawlConfig, Rules, parse_config
from crawler.errors import BadResponse, BadURL, FetchError, FetchTimeout, Refused, TooLarge, TooManyRedirects
from crawler.fetch.aio import AiohttpFetcher
from crawler.fetch.fetcher import BoundedFetcher, HttpFetcher, follow, streamed
from crawler.frontier.urls import canonicalise
from demo.site import Reply, Route, Site, free_port, page, serve
from tests.support.hostile import brotli_bomb, deflate_bomb, double_gzip_bomb, gzip_bomb, trickle

SITE_IP = "127.0.0.21"
BAIT_IP = "127.0.0.1"
HTML = {"Content-Type": "text/html; charset=utf-8"}
GB = 2**30
LIMIT = 1_000_000
RULES = Rules(timeout=5, max_body_bytes=LIMIT, max_redirects=4)
HOME = page("home", ["/a"]).body
assert isinstance(HOME, bytes)


def encoded(coding: str, body: bytes | Reply) -> Reply:
    """An HTML reply with `coding` as its Content-Encoding."""
    if isinstance(body, Reply):
        return Reply(body.status, body.body, {**HTML, "Content-Encoding": coding})
    return Reply(200, body, {**HTML, "Content-Encoding": coding})


def redirect(location: str) -> Reply:
    return Reply(302, b"", {"Location": location})


def routes(port: int) -> dict[str, Route]:
    raw_deflate = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return {
        "/": Reply(200, HOME),
        "/gzip": encoded("gzip", gzip.compress(HOME)),
        "/gzip-members": encoded("gzip", gzip.compress(HOME[:50]) + gzip.compress(HOME[50:])),
        "/deflate": encoded("deflate", zlib.compress(HOME)),
        "/raw-deflate": encoded("deflate", raw_deflate.compress(HOME) + raw_deflate.flush()),
        "/br": encoded("br", brotli.compress(HOME)),
        "/gzip-br": encoded("gzip, br", brotli.compress(gzip.compress(HOME))),
        "/bomb.gz": encoded("gzip", Reply(body=gzip_bomb(2 * GB))),
        "/bomb.deflate": encoded("deflate", Reply(body=deflate_bomb(2 * GB))),
        "/bomb.br": encoded("br", Reply(body=brotli_bomb(2 * GB))),
        "/bomb.gz.gz": encoded("gzip, gzip", Reply(body=double_gzip_bomb(2 * GB))),
        "/zstd": encoded("zstd", b"\x28\xb5\x2f\xfd"),
        "/stacked": encoded("gzip, gzip, gzip, gzip", b""),
        "/corrupt.gz": encoded("gzip", b"\x1f\x8b" + random.Random(1).randbytes(5000)),
        "/big": Reply(200, b" " * (LIMIT + 1)),
        "/big-stream": Reply(body=lambda: iter([b" " * 100_000] * 20)),
        "/trickle": Reply(body=trickle(1000, 0.5)),
        "/binary": Reply(200, random.Random(2).randbytes(200_000)),
        "/not-html": Reply(200, b"\x00" * (LIMIT * 2), {"Content-Type": "application/octet-stream"}),
        "/redirect-ok": redirect("/gzip"),
        "/loop/a": redirect("/loop/b"),
        "/loop/b": redirect("/loop/a"),
        **{f"/hop/{i}": redirect(f"/hop/{i + 1}") for i in range(20)},
        "/to-rebind": redirect(f"http://rebind.hostile.test:{port}/"),
        "/to-meta": redirect("http://meta.hostile.test/latest/meta-data/"),
        "/to-ten": redirect("http://10.0.0.1/"),
        "/to-loopback": redirect(f"http://{BAIT_IP}:{port}/"),
        "/to-v6": redirect(f"http://[::1]:{port}/"),
        "/to-mapped": redirect(f"http://[::ffff:127.0.0.1]:{port}/"),
        "/to-file": redirect("file:///etc/passwd"),
        "/to-gopher": redirect("gopher://hostile.test/"),
        "/to-long": redirect("/" + "x" * 10_000),
    }


@dataclass
class Hostile:
    site: Site
    fetcher: BoundedFetcher
    bait: socket.socket

    def url(self, path: str) -> str:
        return self.site.url(path)

    async def fetch(self, path: str, rules: Rules = RULES) -> bytes:
        response = await follow(self.fetcher, self.url(path), rules, _hop)
        return response.body

    def bait_untouched(self) -> bool:
        """True if nothing connected to the bait listener on 127.0.0.1."""
        try:
            conn, _ = self.bait.accept()
        except BlockingIOError:
            return True
        conn.close()
        return False


async def _hop(url: str) -> None:
    canonicalise(url)  # any http(s) URL: the guard, not the scope, must stop private targets


def config_for(port: int, **extra: object) -> CrawlConfig:
    return parse_config(
        f"""
resolve:
  hostile.test: {SITE_IP}
  rebind.hostile.test: {BAIT_IP}
  meta.hostile.test: 169.254.169.254
allow_networks: [{SITE_IP}/32]
domains: {{hostile.test: {{}}}}
"""
    ).model_copy(update=extra)


@pytest.fixture(scope="module")
def bait() -> Iterator[tuple[int, socket.socket]]:
    """A free port, and a listener on 127.0.0.1 at that port that nothing may connect to."""
    port = free_port(SITE_IP, BAIT_IP)
    with socket.create_server((BAIT_IP, port)) as listener:
        listener.setblocking(False)
        yield port, listener


@pytest.fixture(scope="module")
def site(bait: tuple[int, socket.socket]) -> Iterator[Site]:
    """The hostile site, served for the whole module."""
    port, _ = bait
    site = Site("hostile.test", SITE_IP, port, routes(port))
    with serve(site):
        yield site


@pytest.fixture(params=[HttpFetcher, AiohttpFetcher], ids=["httpx", "aiohttp"])
def transport(request: pytest.FixtureRequest) -> type[BoundedFetcher]:
    """Each fetch test runs over both transports: they promise the same behaviour."""
    kind: type[BoundedFetcher] = request.param
    return kind


@pytest.fixture
async def hostile(
    site: Site, bait: tuple[int, socket.socket], transport: type[BoundedFetcher]
) -> AsyncIterator[Hostile]:
    fetcher = transport(config_for(site.port))  # type: ignore[call-arg]
    try:
        yield Hostile(site, fetcher, bait[1])
    finally:
        await fetcher.aclose()
    assert Hostile(site, fetcher, bait[1]).bait_untouched()


@pytest.mark.parametrize(
    "path", ["/", "/gzip", "/gzip-members", "/deflate", "/raw-deflate", "/br", "/gzip-br", "/redirect-ok"]
)
async def test_content_encodings_are_decoded(hostile: Hostile, path: str) -> None:
    assert await hostile.fetch(path) == HOME


async def test_the_final_url_of_a_followed_redirect_is_recorded(hostile: Hostile) -> None:
    response = await follow(hostile.fetcher, hostile.url("/redirect-ok"), RULES, _hop)
    assert (response.url, response.final_url) == (hostile.url("/redirect-ok"), hostile.url("/gzip"))


async def test_a_fetch_is_one_request_and_returns_a_redirect_as_it_is(hostile: Hostile) -> None:
    before = len(hostile.site.requests)  # the site is shared by the module's tests
    response = await hostile.fetcher.fetch(hostile.url("/redirect-ok"), RULES)
    assert (response.status_code, response.location) == (302, "/gzip")
    assert response.final_url == hostile.url("/redirect-ok")
    assert [path for _, path in hostile.site.requests[before:]] == ["/redirect-ok"]


async def test_follow_clears_every_hop_before_it_is_requested(hostile: Hostile) -> None:
    cleared: list[str] = []

    async def hop(url: str) -> None:
        cleared.append(url)

    before = len(hostile.site.requests)
    await follow(hostile.fetcher, hostile.url("/hop/17"), RULES, hop)
    assert cleared == [hostile.url(f"/hop/{i}") for i in (17, 18, 19, 20)]
    assert [path for _, path in hostile.site.requests[before:]] == [f"/hop/{i}" for i in (17, 18, 19, 20)]


async def test_a_hop_the_callback_refuses_is_never_requested(hostile: Hostile) -> None:
    async def hop(url: str) -> None:
        if url.endswith("/gzip"):
            raise BadURL(f"{url}: host is not in any configured domain of domains.yaml")

    before = len(hostile.site.requests)
    with pytest.raises(Refused, match=r"redirect refused: .* not in any configured domain") as caught:
        await follow(hostile.fetcher, hostile.url("/redirect-ok"), RULES, hop)
    assert caught.value.url == hostile.url("/gzip")
    assert [path for _, path in hostile.site.requests[before:]] == ["/redirect-ok"]


@pytest.mark.parametrize("path", ["/bomb.gz", "/bomb.deflate", "/bomb.br", "/bomb.gz.gz"])
async def test_a_compression_bomb_is_cut_without_being_held(hostile: Hostile, path: str) -> None:
    tracemalloc.start()
    try:
        with pytest.raises(TooLarge, match="once decoded") as caught:
            await hostile.fetch(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 2 GB inflated, cut at 1 MB: about 1.5 MB is held at the peak. Inflating each network read
    # whole, as httpx does, holds ~25 MB for plain gzip and gigabytes for gzip-in-gzip.
    assert peak < 6 * 2**20
    assert not caught.value.transient
    assert caught.value.url == hostile.url(path)


@pytest.mark.parametrize(
    ("path", "error", "message"),
    [
        ("/zstd", BadResponse, "unsupported Content-Encoding 'zstd'"),
        ("/stacked", BadResponse, "stacks 4 codings"),
        ("/corrupt.gz", BadResponse, "does not decode"),
        ("/big", TooLarge, "Content-Length"),
        ("/big-stream", TooLarge, "exceeds max_body_bytes"),
        ("/loop/a", TooManyRedirects, "loop"),
        ("/hop/0", TooManyRedirects, "more than 4 redirects"),
        ("/to-file", Refused, "only http and https"),
        ("/to-gopher", Refused, "only http and https"),
        ("/to-long", Refused, "longer than"),
    ],
)
async def test_permanent_failures(hostile: Hostile, path: str, error: type[FetchError], message: str) -> None:
    with pytest.raises(error, match=message) as caught:
        await hostile.fetch(path)
    assert not caught.value.transient


@pytest.mark.parametrize(
    ("path", "reason", "hop"),
    [
        ("/to-rebind", "loopback", "http://rebind.hostile.test:{port}/"),
        ("/to-meta", "cloud metadata", "http://meta.hostile.test/latest/meta-data/"),
        ("/to-ten", "private", "http://10.0.0.1/"),
        ("/to-loopback", "loopback", "http://127.0.0.1:{port}/"),
        ("/to-v6", "loopback", "http://[::1]:{port}/"),
        ("/to-mapped", "loopback", "http://[::ffff:127.0.0.1]:{port}/"),
    ],
)
async def test_a_redirect_to_a_private_address_is_refused_at_that_hop(
    hostile: Hostile, path: str, reason: str, hop: str
) -> None:
    with pytest.raises(Refused, match=reason) as caught:
        await hostile.fetch(path)
    assert caught.value.url == hop.format(port=hostile.site.port)
    assert caught.value.status_code is None  # refused before connecting: no response at all
    assert hostile.bait_untouched()


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/",
        "http://[::1]:{port}/",
        "http://127.0.0.1:{port}/",
        "http://2130706433:{port}/",
        "http://rebind.hostile.test:{port}/",
        "http://meta.hostile.test/",
    ],
)
async def test_private_targets_are_refused(hostile: Hostile, url: str) -> None:
    with pytest.raises(Refused, match="allow_private_networks"):
        await hostile.fetcher.fetch(url.format(port=hostile.site.port), RULES)
    assert hostile.bait_untouched()


async def test_a_trickling_body_hits_the_whole_fetch_deadline(hostile: Hostile) -> None:
    with pytest.raises(FetchTimeout, match="within 1s") as caught:
        await hostile.fetch("/trickle", RULES.model_copy(update={"timeout": 1.0}))
    assert caught.value.transient


async def test_binary_as_html_is_returned_and_non_html_is_not_read(hostile: Hostile) -> None:
    assert len(await hostile.fetch("/binary")) == 200_000
    assert await hostile.fetch("/not-html") == b""


async def test_without_allow_networks_even_the_site_is_refused(
    bait: tuple[int, socket.socket], transport: type[BoundedFetcher]
) -> None:
    port, _listener = bait
    fetcher = transport(config_for(port, allow_networks=()))  # type: ignore[call-arg]
    try:
        with pytest.raises(Refused, match="loopback"):
            await fetcher.fetch(f"http://hostile.test:{port}/", RULES)
    finally:
        await fetcher.aclose()


async def _streamed(
    fetcher: object, url: str, rules: Rules, stop_after: int | None = None
) -> tuple[int, bytes]:
    got = []
    async with streamed(fetcher, url, rules) as answer:  # type: ignore[arg-type]
        async for piece in answer.pieces:
            got.append(piece)
            if stop_after is not None and sum(map(len, got)) >= stop_after:
                break
        return answer.status_code, b"".join(got)


@pytest.mark.parametrize("path", ["/", "/gzip", "/br", "/binary"])
async def test_a_streamed_body_is_the_fetched_body_decoded_whatever_its_type(
    hostile: Hostile, path: str
) -> None:
    status, body = await _streamed(hostile.fetcher, hostile.url(path), RULES)
    whole = await hostile.fetcher.fetch(hostile.url(path), RULES, html_only=False)
    assert status == 200 and body == whole.body and body


async def test_a_streamed_bomb_stops_at_the_limit_and_a_reader_may_stop_first(hostile: Hostile) -> None:
    read, largest = 0, 0
    with pytest.raises(TooLarge):
        async with streamed(hostile.fetcher, hostile.url("/bomb.gz"), RULES) as answer:
            async for piece in answer.pieces:  # counted, not kept: what the fetch layer holds is a piece
                read, largest = read + len(piece), max(largest, len(piece))
    assert read <= LIMIT and largest <= 256 * 1024
    status, body = await _streamed(hostile.fetcher, hostile.url("/big-stream"), RULES, stop_after=100_000)
    assert status == 200 and 100_000 <= len(body) < 2_000_000  # the rest was never read


async def test_a_streamed_redirect_has_no_body_and_a_fetcher_without_streams_reads_it_whole(
    hostile: Hostile,
) -> None:
    status, body = await _streamed(hostile.fetcher, hostile.url("/redirect-ok"), RULES)
    assert (status, body) == (302, b"")

    class Whole:  # a fetch service's fetcher: no stream()
        async def fetch(
            self, url: str, rules: Rules, *, html_only: bool = True, headers: object = None
        ) -> object:
            return await hostile.fetcher.fetch(url, rules, html_only=html_only)

    assert await _streamed(Whole(), hostile.url("/gzip"), RULES) == (200, HOME)
