"""domains.yaml's discover:, dns: and per_ip: sections: the issue's spelling, errors in one line."""

from __future__ import annotations

import pytest
import yaml

from crawler.errors import ConfigError
from crawler.openweb import Nameserver, parse_open_web

SPELLED = """
discover:
  follow: all          # none (today: links to unlisted hosts are dropped) | all
  allow: [".test"]     # host suffixes admitted; empty admits any
  deny: []             # host suffixes refused
  max_hosts: 200000    # per crawl
  host: {rate: 1, burst: 1, max_pages: 50, max_depth: 3}   # what a discovered host gets
dns:
  nameservers: ["127.0.0.1:5354"]   # absent: the system's resolver
per_ip: {rate: 2, burst: 4}
domains: {shop.test: {}}
"""


def test_the_sections_as_the_issue_spells_them() -> None:
    web = parse_open_web(yaml.safe_load(SPELLED))
    assert web.discover.follow == "all"
    assert web.discover.allow == (".test",)
    assert web.discover.max_hosts == 200_000
    assert (web.discover.host.rate, web.discover.host.max_pages, web.discover.host.max_depth) == (1, 50, 3)
    assert web.dns.nameservers == (Nameserver("127.0.0.1", 5354),)
    assert web.per_ip is not None and (web.per_ip.rate, web.per_ip.burst) == (2, 4)


def test_absent_sections_follow_no_links_and_use_the_systems_resolver() -> None:
    web = parse_open_web({"domains": {"shop.test": {}}})
    assert web.discover.follow == "none" and not web.discover.in_scope("a.test")
    assert web.dns.nameservers is None
    assert web.per_ip is None


def test_the_scope_admits_allowed_suffixes_and_deny_wins() -> None:
    discover = parse_open_web(
        {"discover": {"follow": "all", "allow": [".test"], "deny": ["bad.test"]}}
    ).discover
    assert discover.in_scope("a.test") and discover.in_scope("x.y.test")
    assert not discover.in_scope("a.example")
    assert not discover.in_scope("bad.test") and not discover.in_scope("www.bad.test")
    assert parse_open_web({"discover": {"follow": "all"}}).discover.in_scope("anything.example")


@pytest.mark.parametrize(
    ("nameserver", "parsed"),
    [("127.0.0.1:5354", ("127.0.0.1", 5354)), ("10.0.0.2", ("10.0.0.2", 53)), ("[::1]:5353", ("::1", 5353))],
)
def test_nameservers_are_written_address_and_port(nameserver: str, parsed: tuple[str, int]) -> None:
    assert parse_open_web({"dns": {"nameservers": [nameserver]}}).dns.nameservers == (Nameserver(*parsed),)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"discover": {"allow": ["*.shop.test"]}},
            "discover.allow.0: '*.shop.test': a suffix needs no wildcard",
        ),
        ({"discover": {"follow": "some"}}, "discover.follow: Input should be 'none' or 'all'"),
        ({"discover": {"folow": "all"}}, "discover.folow: unknown key (check its spelling"),
        ({"discover": {"host": {"rate": 0}}}, "discover.host.rate: Input should be greater than 0"),
        (
            {"dns": {"nameservers": ["ns1.example"]}},
            "dns.nameservers.0: 'ns1.example': a name server is an IP",
        ),
        (
            {"dns": {"nameservers": ["127.0.0.1:70000"]}},
            "dns.nameservers.0: '127.0.0.1:70000': the port must be",
        ),
        ({"dns": {"min_ttl": 600, "max_ttl": 60}}, "dns: min_ttl (600) is above max_ttl (60)"),
        ({"per_ip": {"burst": 2}}, "per_ip.rate: Field required"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_key(raw: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_open_web(raw, "d.yaml")
    text = str(caught.value)
    assert text.startswith(f"d.yaml: {message}")
    assert "\n" not in text


def test_the_host_template_turns_the_defaults_recrawl_and_sitemaps_off_or_sets_its_own() -> None:
    from crawler.config import parse_config

    spelled = "defaults: {recrawl: {every: 1d}}\ndomains: {a.test: {}}\ndiscover: {follow: all, host: %s}\n"
    day = parse_config(spelled % "{rate: 2}")
    assert day.host_rules.recrawl is not None and day.host_rules.recrawl.every == 86_400
    assert (day.host_rules.rate, day.host_rules.sitemaps) == (2, "auto")
    for off in ("{recrawl: off}", "{recrawl: null}"):
        config = parse_config(spelled % off)
        assert config.host_rules.recrawl is None and not config.host_rules.recrawls
        assert config.rules_for("a.test").recrawls and config.layout_recrawls == ()
    own = parse_config(spelled % "{recrawl: {every: 2h}, sitemaps: false}").host_rules
    assert own.recrawl is not None and own.recrawl.every == 7_200 and own.sitemaps is False
    with pytest.raises(ConfigError, match=r"discover.host: recrawl.every: .*'1 day' is not a duration"):
        parse_config(spelled % "{recrawl: {every: 1 day}}")
