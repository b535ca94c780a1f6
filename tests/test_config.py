from __future__ import annotations

from pathlib import Path

import pytest

from crawler.config import load_config, parse_config
from crawler.errors import ConfigError
from tests.services import crawler_command

REPO = Path(__file__).resolve().parent.parent


def test_shipped_config_loads() -> None:
    config = load_config(REPO / "config" / "domains.yaml")
    assert set(config.domains) == {"shop.test", "books.test", "games.test"}
    assert config.rules["shop.test"].priority == 9
    assert config.rules["books.test"].priority == config.defaults.priority


def test_domain_inherits_defaults_and_overrides() -> None:
    config = parse_config(
        """
defaults: {rate: 3, retry_delays: [2, 4]}
domains:
  Shop.Test.: {rate: 7, extract: {title: h1}}
  other.test:
"""
    )
    assert config.rules["shop.test"].rate == 7
    assert config.rules["shop.test"].retry_delays == (2, 4)
    assert config.rules["other.test"].rate == 3
    assert config.rules["shop.test"].extract == {"title": "h1"}


@pytest.mark.parametrize(
    ("host", "domain"),
    [
        ("shop.test", "shop.test"),
        ("www.shop.test", "shop.test"),
        ("a.b.shop.test", "shop.test"),
        ("SHOP.TEST", "shop.test"),
        ("myshop.test", None),
        ("test", None),
        ("elsewhere.example", None),
    ],
)
def test_domain_of(host: str, domain: str | None) -> None:
    config = parse_config("domains: {shop.test: {}}")
    assert config.domain_of(host) == domain


def test_retry_tiers_are_every_delay_once() -> None:
    config = parse_config(
        "defaults: {retry_delays: [1, 5]}\nmax_retry_after: 60\ndomains: {a.test: {retry_delays: [5, 30]}}"
    )
    assert config.retry_tiers == (1, 5, 30, 60)


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("defaults: {prioritty: 3}", ["defaults.prioritty", "unknown key"]),
        ("defaults: {priority: 12}", ["defaults.priority", "less than or equal to 9"]),
        ("domains: {shop.test: {rate: fast}}", ["domains.shop.test.rate", "valid number"]),
        ("domains: {shop.test: {prefetch: 0}}", ["domains.shop.test.prefetch", "greater than or equal to 1"]),
        ("domains: {'bad host!': {}}", ["domains", "not a host name"]),
        ("resolve: {shop.test: nowhere}", ["resolve", "not an IP address"]),
        ("domains: {shop.test: {extract: {price: '..price['}}}", ["extract", "price", "CSS selector"]),
        ("domains: {shop.test: {}, www.shop.test: {}}", ["lies inside", "shop.test"]),
        ("- a\n- b", ["expected a mapping"]),
        ("defaults: [1, 2", ["not valid YAML"]),
    ],
)
def test_bad_config_names_key_and_rule(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "domains.yaml")
    message = str(info.value)
    assert message.startswith("domains.yaml")
    for fragment in fragments:
        assert fragment in message


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the config"):
        load_config(tmp_path / "nope.yaml")


def test_cli_reports_bad_config_without_traceback(tmp_path: Path) -> None:
    import subprocess

    bad = tmp_path / "domains.yaml"
    bad.write_text("defaults:\n  max_depth: -1\n")
    result = subprocess.run(
        crawler_command("crawler", "seed", "--config", str(bad), "http://shop.test/"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert str(bad) in result.stderr
    assert "defaults.max_depth" in result.stderr
    assert "Traceback" not in result.stderr
