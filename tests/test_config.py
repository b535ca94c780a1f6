from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawler.config import DedupConfig, FieldRule, load_config, parse_config, with_dedup_mode
from crawler.errors import ConfigError
from crawler.settings import Settings
from tests.support.services import crawler_command

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
    assert config.rules["shop.test"].extract == {"title": FieldRule(css="h1")}  # the short form


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
        ("dedup: {mode: cuckoo}", ["dedup.mode", "'plain', 'compact' or 'bloom'"]),
        ("dedup: {mode: bloom, error_rate: 0.5}", ["dedup.error_rate", "less than or equal to 0.1"]),
        ("dedup: {capacity: 10}", ["dedup.capacity", "greater than or equal to 1000"]),
        ("dedup: {buckets: 1}", ["dedup.buckets", "greater than or equal to 2"]),
        ("dedup: {mod: bloom}", ["dedup.mod", "unknown key"]),
        ("- a\n- b", ["expected a mapping"]),
        ("defaults: [1, 2", ["not valid YAML"]),
        ("defaults: {recrawl: {every: 6x}}", ["defaults.recrawl.every", "'6x' is not a duration"]),
        ("defaults: {recrawl: {every: 1h, min: 2h}}", ["defaults.recrawl", "need min <= every <= max"]),
        ("domains: {a.test: {recrawl: {every: -5}}}", ["domains.a.test.recrawl.every", "greater than 0"]),
        (
            "defaults: {recrawl_rules: [{match: '(', every: 1h}]}",
            ["recrawl_rules.0.match", "regular expression"],
        ),
        ("defaults: {recrawl: {evrey: 1h}}", ["defaults.recrawl.evrey", "unknown key"]),
    ],
)
def test_bad_config_names_key_and_rule(text: str, fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "domains.yaml")
    message = str(info.value)
    assert message.startswith("domains.yaml")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (
            "domains:\n  a.test:\n    rate: fast\n",
            "d.yaml:3: domains.a.test.rate: Input should be a valid number",
        ),
        ("domains:\n  a.test: {}\n  'b c': {}\n", "d.yaml:1: domains: 'b c' is not a host name"),
        ("defaults: [1, 2\n", "d.yaml:2:1: not valid YAML: expected ',' or ']', but got '<stream end>'"),
    ],
)
def test_a_config_error_is_one_line_naming_the_file_the_line_and_the_key(
    tmp_path: Path, text: str, said: str
) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value).replace(str(tmp_path) + "/", "")
    assert message.startswith(said) and "\n" not in message and "unicode string" not in message, message


def test_recrawl_takes_durations_inherits_and_turns_off() -> None:
    config = parse_config(
        """
defaults:
  recrawl: {every: 1d, min: 90m, max: 2w}
  recrawl_rules: [{match: "^/product/", every: 6h}]
domains:
  a.test: {}
  b.test: {recrawl: null}
  c.test: {recrawl: off}
  d.test: {recrawl: {every: 10m}}
  e.test: {recrawl: null, recrawl_rules: [{match: "^/news/", every: 30m}]}
"""
    )
    a = config.rules["a.test"]
    assert a.recrawl is not None and (a.recrawl.every, a.recrawl.lowest, a.recrawl.highest) == (
        86_400,
        5_400,
        1_209_600,
    )
    rule = a.recrawl_for("https://a.test/product/1?x=1")
    assert rule is not None and (rule.every, rule.lowest, rule.highest) == (21_600, 5_400, 1_209_600)
    assert a.recrawl_for("https://a.test/about") == a.recrawl
    for off in ("b.test", "c.test"):  # off, the defaults' rules with it
        assert config.rules[off].recrawl_for("https://x/product/1") is None and not config.rules[off].recrawls
    d = config.rules["d.test"].recrawl
    assert d is not None and (d.every, d.lowest, d.highest) == (
        600,
        600,
        30 * 86_400,
    )  # min and max fit every
    e = config.rules["e.test"]  # off, but its own rule turns it on where it matches
    assert e.recrawl_for("https://e.test/about") is None
    news = e.recrawl_for("https://e.test/news/1")
    assert news is not None and news.every == 1_800
    assert parse_config("").defaults.recrawl is None  # off by default


def test_history_is_off_by_default_inherits_and_turns_off() -> None:
    config = parse_config(
        """
defaults:
  history: {keep: 10}
domains:
  a.test: {}
  b.test: {history: off}
  c.test: {history: {max_age: 30d}}
"""
    )
    a, b, c = (config.rules[d].history for d in ("a.test", "b.test", "c.test"))
    assert a is not None and (a.keep, a.max_age) == (10, 365 * 86_400)
    assert b is None
    assert c is not None and (c.keep, c.max_age) == (100, 30 * 86_400)  # replaces the defaults' whole
    assert parse_config("").defaults.history is None  # off by default
    default = parse_config("defaults:\n  history: {}\n").defaults.history
    assert default is not None and (default.keep, default.max_age) == (100, 365 * 86_400)
    for bad, key in (("{keep: 0}", "keep"), ("{max_age: soon}", "max_age"), ("{kept: 3}", "kept")):
        with pytest.raises(ConfigError, match=key):
            parse_config(f"defaults:\n  history: {bad}\n")


def test_content_is_off_by_default_with_short_forms() -> None:
    config = parse_config(
        """
defaults:
  near_duplicates: skip_links
domains:
  a.test: {content: on}
  b.test: {content: {main: false, formats: [text]}, near_duplicates: {distance: 2}}
  c.test: {near_duplicates: off}
"""
    )
    a, b, c = (config.rules[d] for d in ("a.test", "b.test", "c.test"))
    assert a.content is not None and a.content.main and a.content.formats == ("markdown", "text")
    assert a.near_duplicates is not None and (a.near_duplicates.distance, a.near_duplicates.skip_links) == (
        3,
        True,
    )
    assert b.content is not None and not b.content.main and b.content.formats == ("text",)
    assert b.near_duplicates is not None and (b.near_duplicates.distance, b.near_duplicates.skip_links) == (
        2,
        False,
    )
    assert c.content is None and c.near_duplicates is None and config.content
    assert parse_config("").defaults.content is None and not parse_config("").content
    for bad, key in (
        ("{formats: [html]}", "formats"),
        ("{formats: []}", "formats"),
        ("{mian: true}", "mian"),
    ):
        with pytest.raises(ConfigError, match=key):
            parse_config(f"defaults:\n  content: {bad}\n")
    with pytest.raises(ConfigError, match="distance"):
        parse_config("defaults:\n  near_duplicates: {distance: 5}\n")


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


@pytest.mark.parametrize(
    "text",
    [
        "user_agent: !!python/object/apply:os.system ['touch {marker}']",
        "domains: !!python/object/new:subprocess.Popen [['touch', '{marker}']]",
        "tracking_params: !!python/name:os.system",
    ],
)
def test_the_config_cannot_run_code(tmp_path: Path, text: str) -> None:
    marker = tmp_path / "ran"
    with pytest.raises(ConfigError, match="not valid YAML"):
        parse_config(text.format(marker=marker))
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("allow_networks: [10.0.0.1/8]", "has host bits set"),
        ("allow_networks: [somewhere]", "is not a network"),
        ('user_agent: "crawler\\r\\nX-Injected: 1"', "printable ASCII on one line"),
    ],
)
def test_bad_network_settings_are_refused(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(text)


def test_allow_networks_takes_networks_and_single_addresses() -> None:
    config = parse_config("allow_networks: [127.0.0.21, 10.1.0.0/16, 'fd00::/8']")
    assert [str(n) for n in config.allow_networks] == ["127.0.0.21/32", "10.1.0.0/16", "fd00::/8"]


def test_dedup_is_plain_unless_chosen() -> None:
    assert parse_config("").dedup == DedupConfig(mode="plain", capacity=10_000_000, error_rate=0.001)
    config = parse_config("dedup: {mode: bloom, capacity: 50000, error_rate: 0.0001}")
    assert (config.dedup.mode, config.dedup.capacity, config.dedup.error_rate) == ("bloom", 50_000, 0.0001)


def test_crawler_dedup_overrides_the_files_mode_and_keeps_its_sizing() -> None:
    settings = Settings.from_env({"CRAWLER_DEDUP": "Compact"})
    assert settings.dedup == "Compact"
    assert Settings.from_env({"CRAWLER_DEDUP": ""}).dedup is None
    config = parse_config("dedup: {mode: bloom, capacity: 50000}")
    overridden = with_dedup_mode(config, settings.dedup)
    assert (overridden.dedup.mode, overridden.dedup.capacity) == ("compact", 50_000)
    assert config.dedup.mode == "bloom"  # the file's own stays as it was
    assert with_dedup_mode(config, None) is config


def test_a_bad_crawler_dedup_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    import os
    import subprocess

    config = tmp_path / "domains.yaml"
    config.write_text("domains: {shop.test: {}}\n")
    with pytest.raises(ConfigError, match=r"^CRAWLER_DEDUP='cuckoo': Input should be .*'bloom'$"):
        with_dedup_mode(parse_config(""), "cuckoo")
    result = subprocess.run(
        crawler_command("crawler", "seed", "--config", str(config), "http://shop.test/"),
        env={**os.environ, "CRAWLER_DEDUP": "cuckoo"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "CRAWLER_DEDUP" in result.stderr and "'plain', 'compact' or 'bloom'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("extract", "fragments"),
    [
        (
            {"price": {"css": "p[", "type": "price"}},
            ["domains.shop.test.extract.price", "not a CSS selector"],
        ),
        ({"price": {"xpath": "//p[@class="}}, ["domains.shop.test.extract.price", "not an XPath expression"]),
        ({"price": {"css": "p", "type": "money"}}, ["extract.price.type", "'price'"]),
        ({"price": {"css": "p", "xpath": "//p"}}, ["extract.price", "exactly one of css or xpath"]),
        ({"price": {"type": "price"}}, ["extract.price", "exactly one of css or xpath"]),
        ({"price": {"css": "p", "regex": "(unclosed"}}, ["extract.price", "not a regular expression"]),
        ({"price": {"css": "p", "colour": "red"}}, ["extract.price.colour", "unknown key"]),
        ({"price": {"css": "p", "format": "%d"}}, ["extract.price", "type: date only"]),
        (
            {"reviews": {"css": ".r", "fields": {"stars": {"css": "x[", "type": "int"}}}},
            ["extract.reviews.fields.stars", "not a CSS selector"],
        ),
        ({"reviews": {"css": ".r", "type": "int", "fields": {"a": "b"}}}, ["extract.reviews", "group"]),
    ],
)
def test_invalid_fields_name_the_domain_the_field_and_what_is_wrong(
    extract: dict[str, Any], fragments: list[str]
) -> None:
    text = yaml.safe_dump({"domains": {"shop.test": {"extract": extract}}})
    with pytest.raises(ConfigError) as info:
        parse_config(text, "d.yaml")
    message = str(info.value)
    assert message.startswith("d.yaml:")
    for fragment in fragments:
        assert fragment in message


@pytest.mark.parametrize(
    ("rules", "fragments"),
    [
        (
            {"parse": "tests.parse.nowhere:fn"},
            ["domains.shop.test.parse", "cannot import tests.parse.nowhere"],
        ),
        ({"parse": "tests.parse.hooks:missing"}, ["domains.shop.test.parse", "has no function missing"]),
        ({"parse": "tests.parse.hooks:NOT_CALLABLE"}, ["parse", "has no function NOT_CALLABLE"]),
        ({"parse": "tests.parse.hooks"}, ["parse", "package.module:function"]),
        ({"parsers": [{"match": "^/p/", "parse": "nope:fn"}]}, ["domains.shop.test.parsers.0.parse", "nope"]),
        ({"parsers": [{"match": "(", "parse": "tests.parse.hooks:raises"}]}, ["parsers.0.match"]),
        ({"structured": ["json-ld", "rdfa"]}, ["domains.shop.test.structured.1", "'microdata'"]),
    ],
)
def test_invalid_hooks_and_structured_are_refused(rules: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(yaml.safe_dump({"domains": {"shop.test": rules}}), "d.yaml")
    for fragment in fragments:
        assert fragment in str(info.value)


def test_the_full_field_language_loads() -> None:
    config = parse_config(
        """
defaults: {structured: [json-ld]}
domains:
  shop.test:
    parse: tests.parse.hooks:plain_dict
    parsers: [{match: "^/product/", parse: "tests.parse.hooks:fields_and_links"}]
    extract:
      title: h1
      price: {css: .price, type: price, required: true}
      images: {css: img, attr: src, all: true}
      sku: {xpath: "//p[@class='sku']", regex: 'SKU: (\\S+)'}
      reviews: {css: .review, all: true, fields: {author: .author, rating: {css: .stars, type: int}}}
"""
    )
    rules = config.rules["shop.test"]
    assert rules.structured == ("json-ld",)
    assert rules.extract["price"].required and rules.extract["price"].type == "price"
    assert rules.extract["reviews"].fields is not None
    assert rules.extract["reviews"].fields["author"] == FieldRule(css=".author")
    assert rules.parsers[0].parse == "tests.parse.hooks:fields_and_links"


def test_a_bad_hook_exits_2_naming_the_domain(tmp_path: Path) -> None:
    path = tmp_path / "d.yaml"
    path.write_text("domains: {shop.test: {parse: 'tests.parse.nowhere:fn'}}\n")
    result = subprocess.run(
        crawler_command("crawler", "seed", "--config", str(path), "https://shop.test/"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "domains.shop.test.parse" in result.stderr and "cannot import" in result.stderr


def test_render_options_per_domain_and_per_url_rule() -> None:
    config = parse_config(
        "domains:\n"
        "  a.test:\n"
        "    fetch: {via: api, render_js: true, wait_until: networkidle, wait_for: '#app li'}\n"
        "    fetch_rules: [{match: '^/static/', fetch: api}]\n"
    )
    rules = config.rules["a.test"]
    spec = rules.fetch_for("http://a.test/list")
    assert (spec.render_js, spec.wait_until, spec.wait_for) == (True, "networkidle", "#app li")
    assert not rules.fetch_for("http://a.test/static/x").render_js and rules.renders
    for text, message in (
        ("defaults: {fetch: {render_js: true}}", "render_js need `via: api`"),
        ("defaults: {fetch: {via: api, wait_for: '#x'}}", "apply to rendered pages only"),
        ("defaults: {fetch: {via: api, render_js: true, wait_until: idle}}", "defaults.fetch.wait_until"),
        ("defaults: {fetch: {via: api, render_js: true, wait_for: 'p[['}}", "is not a CSS selector"),
    ):
        with pytest.raises(ConfigError, match=re.escape(message)):
            parse_config(text)


def test_sitemaps_are_auto_by_default_a_list_or_off() -> None:
    config = parse_config(
        """
defaults:
  sitemaps: auto
domains:
  a.test: {}
  b.test: {sitemaps: off}
  c.test: {sitemaps: ["https://c.test/products.xml.gz"]}
  d.test: {sitemaps: true}
"""
    )
    assert [config.rules[d].sitemaps for d in ("a.test", "b.test", "c.test", "d.test")] == [
        "auto",
        False,
        ("https://c.test/products.xml.gz",),
        "auto",
    ]
    assert parse_config("").defaults.sitemaps == "auto"
    for bad, why in (
        ("maybe", "give auto, false, or a list"),
        ("[ftp://c.test/s.xml]", "not an absolute http"),
    ):
        with pytest.raises(ConfigError, match=why):
            parse_config(f"domains:\n  a.test: {{sitemaps: {bad}}}\n")


def test_expect_per_domain_and_per_url_rule_and_its_mistakes_in_one_line(tmp_path: Path) -> None:
    config = parse_config(
        "defaults: {expect: {min_items: 5}}\n"
        "domains:\n"
        "  shop.test:\n"
        "    extract: {price: .price}\n"
        "    expect:\n"
        "      fields: {price: {present: 95%, range: '> 0'}}\n"
        "      pages: [{name: product, match: ^/p/, fields: {sku: {pattern: '^[A-Z]'}}}]\n"
        "  other.test: {}\n"
    )
    shop = config.rules["shop.test"].expect
    assert shop is not None and shop.fields["price"].present == 0.95 and shop.pages[0].name == "product"
    assert "json_schema" not in shop.pages[0].model_fields_set  # the domain's schema still applies there
    other = config.rules["other.test"].expect
    assert other is not None and other.min_items == 5
    for text, said in [
        ("{price: {range: '=> 0'}}", "domains.a.test.expect.fields.price.range: unknown comparison '=>'"),
        ("{sku: {regex: x}}", "domains.a.test.expect.fields.sku.regex: unknown key; did you mean 'pattern'?"),
        ("{price: {present: 95}}", "domains.a.test.expect.fields.price.present: 95 is not a rate"),
    ]:
        path = tmp_path / "d.yaml"
        path.write_text(f"domains:\n  a.test:\n    expect:\n      fields: {text}\n")
        with pytest.raises(ConfigError) as info:
            load_config(path)
        message = str(info.value).replace(str(tmp_path) + "/", "")
        assert message.startswith(f"d.yaml:4: {said}") and "\n" not in message, message
    with pytest.raises(ConfigError, match=r"domains\.a\.test\.expect\.schema: not a valid JSON Schema"):
        parse_config("domains: {a.test: {expect: {schema: {type: objekt}}}}")
