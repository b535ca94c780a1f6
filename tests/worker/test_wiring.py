"""A crawl's wiring: the domains and seeds it accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from crawler.config import load_config
from crawler.errors import BadURL, ConfigError
from crawler.worker import wiring
from demo.site import Site, page
from tests.support.sites import IPS, write_config


def sites() -> list[Site]:
    return [Site(h, IPS[h], 8080, {"/": page("home", [])}) for h in ("a.test", "b.test")]  # only named


def test_check_domains_takes_all_or_the_named_known_ones(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", sites()))
    assert wiring.check_domains(config, None) == ["a.test", "b.test"]
    assert wiring.check_domains(config, [" B.test ", ""]) == ["b.test"]
    with pytest.raises(ConfigError, match=re.escape("not configured in domains.yaml: z.test")):
        wiring.check_domains(config, ["a.test", "z.test"])
    with pytest.raises(ConfigError, match="no domain named"):
        wiring.check_domains(config, ["\x1c", " "])  # a blank choice is not "every domain"


def test_an_error_about_many_domains_stays_one_short_line(tmp_path: Path) -> None:
    (tmp_path / "shops.txt").write_text("".join(f"d{i:04}.test\n" for i in range(2_000)))
    path = write_config(tmp_path / "d.yaml", sites())
    more = {"domains_file": {"path": "shops.txt"}, "frontier": {"max_domain_queues": 5_000}}
    path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **more}))
    config = load_config(path)
    assert len(config.domains) == 2_002  # a queue each: every one is "configured"
    with pytest.raises(ConfigError) as refused:
        wiring.check_domains(config, ["a.test", "z.test"])
    message = str(refused.value)
    assert message.startswith("not configured in domains.yaml: z.test (configured: a.test, b.test, d0000")
    assert message.endswith("and 1,992 more)") and len(message) < 300, message
    with pytest.raises(BadURL) as outside:
        wiring.check_seeds(config, ["http://elsewhere.test/"])
    assert str(outside.value).endswith("and 1,992 more)") and len(str(outside.value)) < 300


def test_check_seeds_canonicalises_and_refuses_other_hosts(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path / "d.yaml", sites()))
    assert wiring.check_seeds(config, ["HTTP://A.test:8080/#top"]) == ["http://a.test:8080/"]
    with pytest.raises(BadURL, match=re.escape("http://elsewhere.test/: its host is in no domain")):
        wiring.check_seeds(config, ["http://a.test:8080/", "http://elsewhere.test/"])
