"""`domains_file:`: a list of domains too long for domains.yaml, each with a queue of its own under
frontier.max_domain_queues and served by the host layout's shard queues past it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client import generate_latest

from crawler.config import CrawlConfig, load_config
from crawler.errors import ConfigError
from crawler.frontier.hosts import frontier_key, host_key
from crawler.monitor.metrics import Metrics
from crawler.names import LISTED_LABEL
from crawler.worker.wiring import check_domains
from demo.site import serve
from tests.hosts.test_layout import only_crawl, pages, sites, stored
from tests.support.services import AUTH, MANAGEMENT, run, settings_for


def write(tmp_path: Path, lines: str, **config: Any) -> Path:
    (tmp_path / "shops.txt").write_text(lines)
    path = tmp_path / "domains.yaml"
    path.write_text(yaml.safe_dump({"domains": {"a.test": {"rate": 2}}, **config}))
    return path


def test_under_the_line_each_domain_gets_a_queue_and_the_template(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "b.test\nc.test\n", domains_file={"path": "shops.txt", "template": {"rate": 7}})
    )
    assert sorted(config.domains) == ["a.test", "b.test", "c.test"]
    assert not config.layout_domains and not config.host_layout
    assert config.rules_for("c.test").rate == 7 and config.rules_for("a.test").rate == 2
    assert config.rules["b.test"] is config.rules["c.test"]  # one template, merged once
    assert frontier_key(config, "www.b.test", 5) == "www.b.test"


def test_past_the_line_the_domains_share_the_host_layout(tmp_path: Path) -> None:
    config = load_config(
        write(
            tmp_path,
            "b.test\nc.test\n",
            domains_file={"path": "shops.txt", "template": {"rate": 7}},
            frontier={"max_domain_queues": 2},
        )
    )
    assert sorted(config.domains) == ["a.test"]
    assert config.layout_domains == {"b.test", "c.test"} and config.host_layout
    assert config.domain_of("www.b.test") == "b.test" and config.rules_for("b.test").rate == 7
    assert not config.discovered("www.b.test")  # listed: no discovery caps, no host template
    # A subdomain's URLs go to its domain's shard: the domain is the unit of politeness, as listed.
    assert frontier_key(config, "www.b.test", 5) == host_key("b.test", config.discover.shards)
    assert frontier_key(config, "a.test", 5) == "a.test"
    assert check_domains(config, ["b.test"]) == ["b.test"]  # a reparse, a prune, a crawl's scope
    with pytest.raises(
        ConfigError, match=r"b\.test: listed in the domains file past frontier\.max_domain_queues"
    ):
        check_domains(config, ["b.test"], queued=True)  # consume, pause, migrate: it has no queue


def test_past_the_line_the_domains_share_one_metrics_label(tmp_path: Path) -> None:
    config = load_config(
        write(tmp_path, "b.test\nc.test\n", domains_file="shops.txt", frontier={"max_domain_queues": 2})
    )
    metrics = Metrics(process=False)
    metrics.fold_domains(config.discovered, lambda domain: domain in config.layout_domains)
    for domain in ("a.test", "b.test", "c.test"):
        metrics.observe_outcome(domain, "ok", 200)
    text = generate_latest(metrics.registry).decode()
    assert f'crawler_pages_total{{domain="{LISTED_LABEL}",outcome="ok",status_class="2xx"}} 2.0' in text
    assert 'crawler_pages_total{domain="a.test",outcome="ok",status_class="2xx"} 1.0' in text
    assert "b.test" not in text


@pytest.mark.parametrize(
    ("lines", "config", "error"),
    [
        ("b.test\nbad_name!\n", {}, r"shops.txt:2: 'bad_name!'"),
        ("b.test\na.test\n", {}, r"shops.txt:2: 'a.test' is listed under `domains:` too"),
        ("b.test\n\nshop.a.test\n", {}, r"shops.txt:3: 'shop.a.test' lies inside 'a.test'"),
        ("x.b.test\nb.test\n", {}, r"shops.txt:1: 'x.b.test' lies inside 'b.test'"),
    ],
)
def test_a_bad_domains_file_is_named_by_file_and_line(
    tmp_path: Path, lines: str, config: dict[str, Any], error: str
) -> None:
    path = write(
        tmp_path,
        lines,
        domains_file={"path": "shops.txt", "template": config},
        frontier={"max_domain_queues": 1},
    )
    with pytest.raises(ConfigError, match=error):
        load_config(path)


def queues(amqp_url: str) -> set[str]:
    vhost = amqp_url.rsplit("/", 1)[1]
    with httpx.Client(base_url=MANAGEMENT, auth=AUTH, timeout=30, trust_env=False) as api:
        return {q["name"] for q in api.get(f"/api/queues/{vhost}").raise_for_status().json()}


def test_a_crawl_of_listed_domains_past_the_line_uses_the_template_and_no_queue_each(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": ["b.test/", "www.b.test/", "e.test/"]}),
            "b.test": ("127.0.0.61", {"/": ["b.test/1"], "/1": []}),
            "www.b.test": ("127.0.0.62", {"/": []}),
            "c.test": (
                "127.0.0.63",
                {"/": ["c.test/1", "c.test/2", "c.test/3"], **{f"/{i}": [] for i in (1, 2, 3)}},
            ),
            "e.test": ("127.0.0.64", {"/": []}),
        }
    )
    (tmp_path / "shops.txt").write_text("# shops\nb.test\nc.test\nd.test\n")
    config = {
        "defaults": {"retry_delays": [0.2, 0.4], "sitemaps": False},
        "resolve": {s.host: s.ip for s in served.values()},
        "allow_private_networks": True,
        "frontier": {"max_domain_queues": 2},
        "domains": {"a.test": {}},
        "domains_file": {"path": "shops.txt", "template": {"rate": 50, "burst": 5, "max_pages": 3}},
    }
    path = tmp_path / "domains.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    refused = run("crawler-consume", ["--burst", "--domains", "b.test"], settings)
    assert refused.returncode == 2 and "past frontier.max_domain_queues" in refused.stderr, refused.stderr
    with serve(*served.values()):
        result = run(
            "crawler", ["crawl", served["a.test"].url(), served["c.test"].url()], settings, timeout=60
        )
    assert result.returncode == 0, result.stderr
    domains = stored(sqlite_url)
    b = served["b.test"]
    assert {u: d for u, d in domains.items() if d == "b.test"} == {
        b.url(): "b.test",
        b.url("/1"): "b.test",
        served["www.b.test"].url(): "b.test",  # a subdomain is its listed domain's
    }
    assert len([d for d in domains.values() if d == "c.test"]) == 3  # the template's max_pages
    assert len(pages(served["c.test"])) == 3
    assert served["e.test"].requests == []  # listed nowhere, and discovery is off
    assert only_crawl(settings)["state"] == "finished"
    status = run("crawler", ["status", "--json"], settings)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["discovered"]["listed"] == 3  # counted, never listed one by one
    made = queues(amqp_url)
    assert f"{prefix}.domain.a.test" in made and f"{prefix}.hosts.0" in made
    assert not [q for q in made if ".domain.b.test" in q or ".domain.c.test" in q], made


@pytest.mark.parametrize("line", [10, 2], ids=["under the line", "past the line"])
def test_a_webhook_may_name_the_domains_files_domains(tmp_path: Path, line: int) -> None:
    def configured(*domains: str) -> CrawlConfig:
        hook = {"url": "https://hooks.example/", "secret": "s" * 32, "domains": list(domains)}
        lines, queues = "b.test\nc.test\n", {"max_domain_queues": line}
        return load_config(write(tmp_path, lines, domains_file="shops.txt", frontier=queues, webhooks=[hook]))

    config = configured("a.test", "c.test")
    assert config.webhooks[0].wants("c.test", "new") and not config.webhooks[0].wants("b.test", "new")
    with pytest.raises(ConfigError, match=r"shops\.txt: webhooks\.0\.domains: not configured under "):
        configured("c.test", "d.test")
