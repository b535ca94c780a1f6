from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.errors import BadURL
from crawler.frontier.urls import canonicalise, fingerprint, host_of


@pytest.mark.parametrize(
    ("url", "canonical"),
    [
        ("HTTP://WWW.Shop.TEST/A/b", "http://www.shop.test/A/b"),  # path case kept
        ("http://shop.test/x?utm_source=a&utm_medium=b&id=3", "http://shop.test/x?id=3"),
        ("http://shop.test/x?gclid=1&fbclid=2", "http://shop.test/x"),
        ("http://shop.test/x?b=2&a=1&c=3", "http://shop.test/x?a=1&b=2&c=3"),  # query sorted
        ("http://shop.test/x#reviews", "http://shop.test/x"),  # fragment dropped
        ("http://shop.test:80/", "http://shop.test/"),
        ("https://shop.test:443/", "https://shop.test/"),
        ("http://shop.test:8080/", "http://shop.test:8080/"),
        ("http://shop.test", "http://shop.test/"),
        ("http://user:pw@shop.test/", "http://shop.test/"),
        ("http://shop.test/a%7eb", "http://shop.test/a~b"),
        ("http://shop.test/a b", "http://shop.test/a%20b"),
        ("http://bücher.test/", "http://xn--bcher-kva.test/"),
        ("  http://shop.test/  ", "http://shop.test/"),
        ("http://[::1]:80/x", "http://[::1]/x"),
    ],
)
def test_canonical_form(url: str, canonical: str) -> None:
    assert canonicalise(url) == canonical


def test_relative_links_resolve_against_the_page() -> None:
    assert canonicalise("../c?b=1#x", "http://shop.test/a/b/") == "http://shop.test/a/c?b=1"
    assert canonicalise("//other.test/p", "https://shop.test/") == "https://other.test/p"


def test_configured_tracking_params_are_dropped() -> None:
    assert canonicalise("http://s.test/?ref=x&id=1", tracking={"ref"}) == "http://s.test/?id=1"


@pytest.mark.parametrize(
    "url",
    ["", "ftp://shop.test/", "mailto:a@b.test", "javascript:x", "http://", "http://[::1/", "http://a:99999/"],
)
def test_uncrawlable_urls_raise_bad_url(url: str) -> None:
    with pytest.raises(BadURL):
        canonicalise(url)


def test_fingerprint_is_8_bytes_and_stable() -> None:
    assert fingerprint("http://shop.test/") == fingerprint("http://shop.test/")
    assert fingerprint("http://shop.test/") != fingerprint("http://shop.test/a")
    assert len(fingerprint("http://shop.test/")) == 8
    assert host_of("http://www.shop.test:8080/x") == "www.shop.test"


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200), st.one_of(st.none(), st.text(max_size=50)))
def test_canonicalise_raises_only_bad_url_and_is_idempotent(text: str, base: str | None) -> None:
    try:
        once = canonicalise(text, base)
    except BadURL:
        return
    assert canonicalise(once) == once


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(["http", "HTTPS"]),
    st.from_regex(r"[a-zA-Z0-9-]{1,10}(\.[a-zA-Z]{2,5}){1,2}", fullmatch=True),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40),
)
def test_canonical_urls_are_idempotent(scheme: str, host: str, rest: str) -> None:
    try:
        once = canonicalise(f"{scheme}://{host}/{rest}")
    except BadURL:
        return
    assert canonicalise(once) == once


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_the_remembered_canonical_link_is_the_canonical_form(text: str) -> None:
    from crawler.frontier.urls import canonical_link

    try:
        expected = canonicalise(text, tracking=("ref",))
    except BadURL:
        with pytest.raises(BadURL):
            canonical_link(text, ("ref",))
        return
    assert canonical_link(text, ("ref",)) == expected
    assert canonical_link(text, ("ref",)) == expected  # and again, from memory


def test_a_worker_remembers_a_bounded_number_of_links() -> None:
    from crawler.frontier.traps import _path_shape
    from crawler.frontier.urls import canonical_link
    from crawler.hosts.registered import registered_domain
    from crawler.names import LINKS_REMEMBERED

    # The open web's links are mostly met once: an unbounded memory of them grows with every host.
    for i in range(LINKS_REMEMBERED + 100):
        url = canonical_link(f"http://h{i}.d{i}.test/p/{i}", ())
        _path_shape(url)
        registered_domain(host_of(url))
    for remembered in (canonical_link, host_of, _path_shape, registered_domain):
        assert remembered.cache_info().currsize == LINKS_REMEMBERED
