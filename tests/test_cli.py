"""The command line as a person meets it: exit codes, one clear line per error, no passwords."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from demo.site import serve
from tests.support.services import run, settings_for
from tests.support.sites import reachable, shops, write_config


def test_crawl_runs_end_to_end_and_prints_a_summary(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=6)
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites):
        result = run("crawler", ["crawl", *(s.url() for s in sites)], settings)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["domain", "ok", "failed"]
    for site in sites:
        row = next(line.split() for line in lines if line.startswith(site.host))
        assert row[1:3] == ["7", "1"]  # home + 6 products; /missing failed
    assert lines[-1].startswith(f"{len(reachable(sites))} pages in ")

    status = run("crawler", ["status", "--json"], settings)
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    by_domain = {d["domain"]: d for d in data["domains"]}
    assert {d: (v["pages_ok"], v["pages_failed"], v["queue"]["ready"]) for d, v in by_domain.items()} == {
        s.host: (7, 1, 0) for s in sites
    }
    assert run("crawler", ["db", "upgrade"], settings).returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["seed", "ftp://a.test/"], "only http and https"),
        (["seed", "http://[::1"], "not a valid URL"),
        (["seed", "http://elsewhere.test/"], "in no domain of domains.yaml"),
        (["crawl", "not a url"], "only http and https"),
    ],
)
def test_bad_seeds_exit_2_with_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    sites = shops(products=1, hosts=["a.test"])
    settings = settings_for(
        "amqp://guest:guest@localhost:5672/", "x", "sqlite://", write_config(tmp_path / "d.yaml", sites)
    )
    result = run("crawler", args, settings)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("field", "url", "service"),
    [
        ("amqp_url", "amqp://guest:sekret@127.0.0.1:1/", "RabbitMQ"),
        ("redis_url", "redis://:sekret@127.0.0.1:1/0", "Redis"),
        ("database_url", "postgresql://postgres:sekret@127.0.0.1:1/x", "127.0.0.1:1"),
    ],
)
def test_an_unreachable_service_is_one_line_without_its_password(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, field: str, url: str, service: str
) -> None:
    sites = shops(products=1, hosts=["a.test"])
    settings = replace(
        settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites)), **{field: url}
    )
    result = run("crawler", ["crawl", sites[0].url()], settings)
    assert result.returncode == 2
    assert service in result.stderr
    assert "sekret" not in result.stderr + result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
