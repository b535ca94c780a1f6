"""One checker of host names for URLs, the discover scope and the domains file."""

from __future__ import annotations

import pytest

from crawler.errors import BadHost
from crawler.hosts import check_domain, check_host, check_suffix, registered_domain, suffix_matches


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("Shop.Test.", "shop.test"),
        ("bücher.test", "xn--bcher-kva.test"),  # IDN stored as punycode
        ("BÜCHER.test", "xn--bcher-kva.test"),
        ("xn--bcher-kva.test", "xn--bcher-kva.test"),
        ("a_b.test", "a_b.test"),
        ("a" * 63 + ".test", "a" * 63 + ".test"),
    ],
)
def test_host_names_are_spelled_canonically(text: str, canonical: str) -> None:
    assert check_host(text) == canonical
    assert check_domain(text) == canonical
    assert check_suffix(text) == "." + canonical


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a" * 64 + ".test", "64 characters long: a label has at most 63"),
        (".".join(["a" * 60] * 5), "is 304 characters long: a host name has at most 253"),
        ("a..b.test", "empty label"),
        ("-a.test", "may not begin or end with '-'"),
        ("a b.test", "may hold only letters"),
        ("", "empty host name"),
        ("*.shop.test", "'*' is not allowed"),
        ("shop.*", "wildcard top-level domain"),
        (".shop.test", "no leading dot (write 'shop.test')"),
    ],
)
def test_what_cannot_be_a_host_is_refused_with_its_reason(text: str, why: str) -> None:
    with pytest.raises(BadHost) as caught:
        check_host(text)
    assert why in str(caught.value)


@pytest.mark.parametrize("text", ["127.0.0.1", "[::1]", "::1", "2130706433", "0x7f.1", "1.2.3.999"])
def test_ip_literal_hosts_are_refused_unless_allowed(text: str) -> None:
    with pytest.raises(BadHost, match="IP-literal hosts are refused unless discover's allow_ip_hosts"):
        check_host(text)
    with pytest.raises(BadHost, match="list a domain name"):
        check_domain(text)


def test_ip_literal_hosts_are_spelled_as_addresses_when_allowed() -> None:
    assert check_host("127.0.0.1", allow_ip=True) == "127.0.0.1"
    assert check_host("2130706433", allow_ip=True) == "127.0.0.1"
    assert check_host("[::1]", allow_ip=True) == "[::1]"


@pytest.mark.parametrize(
    ("text", "check", "advice"),
    [
        ("*.shop.test", check_domain, "write 'shop.test', which covers its subdomains"),
        (".shop.test", check_domain, "a domain has no leading dot: write 'shop.test'"),
        ("shop.*", check_domain, "name each domain (e.g. shop.com, shop.net)"),
        ("*.shop.test", check_suffix, "write '.shop.test', which matches every host under it"),
        ("shop.*", check_suffix, "wildcard top-level domain"),
        ("sh*p.test", check_domain, "'*' is not allowed in a host name"),
    ],
)
def test_wildcard_mistakes_are_named(text: str, check: object, advice: str) -> None:
    with pytest.raises(BadHost) as caught:
        check(text)  # type: ignore[operator]
    assert advice in str(caught.value)


def test_a_suffix_matches_the_host_itself_and_hosts_under_it_only() -> None:
    suffix = check_suffix(".shop.test")
    assert check_suffix("shop.test") == suffix
    assert suffix_matches("shop.test", suffix)
    assert suffix_matches("a.b.shop.test", suffix)
    assert not suffix_matches("myshop.test", suffix)
    assert not suffix_matches("shop.test.evil", suffix)


@pytest.mark.parametrize(
    ("host", "registered"),
    [
        ("a.b.test", "b.test"),  # an unknown TLD: the default rule `*`
        ("b.test", "b.test"),
        ("test", "test"),  # a public suffix is its own
        ("www.bbc.co.uk", "bbc.co.uk"),
        ("a.b.c.example.com", "example.com"),
        ("x.y.github.io", "y.github.io"),  # a private suffix: each site its own domain
        ("a.b.xn--55qx5d.cn", "b.xn--55qx5d.cn"),  # 公司.cn, as punycode
        ("127.0.0.1", "127.0.0.1"),
        ("[::1]", "[::1]"),
    ],
)
def test_registered_domains_follow_the_bundled_public_suffix_list(host: str, registered: str) -> None:
    assert registered_domain(host) == registered
