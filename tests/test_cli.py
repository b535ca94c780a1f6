"""The command line as a person meets it: exit codes, one clear line per error, no passwords."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from crawler.settings import Settings
from crawler.sink.sql import engine_url
from demo.site import serve
from tests.support.services import crawler_command, env_for, run, settings_for
from tests.support.sites import after_requests, reachable, shops, slow, write_config


@contextmanager
def engine_of(database_url: str) -> Iterator[sa.Connection]:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


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
        (["seed", "--label", "x" * 5_000, "http://a.test/"], "--label 'xxxx"),  # shown cut short
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
    assert len(result.stderr.strip().splitlines()) == 1 and len(result.stderr) < 1_000
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


def _crawls(settings: Settings) -> dict[str, dict[str, Any]]:
    listed = run("crawler", ["crawls", "list", "--json"], settings)
    assert listed.returncode == 0, listed.stderr
    return {c["id"]: c for c in map(json.loads, listed.stdout.splitlines())}


def _crawl_id(stderr: str) -> str:
    return next(line.split()[1] for line in stderr.splitlines() if line.startswith("crawl "))


def test_a_crawl_ends_when_its_work_does_whoever_watches_and_ctrl_c_interrupts_it(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    [site] = shops(products=3, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site]))
    with serve(site):
        # The demo twice: nobody looks at the first crawl before the second wipes the counters.
        first = run("crawler", ["crawl", site.url()], settings)
        first_ended = datetime.now(UTC)
        second = run("crawler", ["crawl", "--fresh", site.url()], settings)
        for done in (first, second):
            assert done.returncode == 0, done.stderr
        # A fleet: seeded, consumed by a worker that knows nothing of the crawl; no view in between.
        seeded = run("crawler", ["seed", "--label", "fleet", site.url()], settings)
        assert seeded.returncode == 0, seeded.stderr
        fleet = seeded.stdout.split()[-1]
        assert run("crawler-consume", ["--burst"], settings).returncode == 0
        with engine_of(sqlite_url) as conn:
            state = conn.execute(sa.text("SELECT state FROM crawls WHERE id = :id"), {"id": fleet}).scalar()
        assert state == "finished"
        # Ctrl-C mid-crawl: the crawl is interrupted, and says so.
        slow(site, 0.3)
        asked = after_requests([site], len(site.requests) + 1)
        process = subprocess.Popen(
            crawler_command("crawler", "crawl", "--fresh", site.url()),
            env=env_for(settings),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert asked.wait(60)
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=60)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        crawls = _crawls(settings)
        # A new crawl says it takes up what another crawl left queued (the broker asked, not its API).
        seeded_left = run("crawler", ["seed", "--label", "left", site.url()], settings)
        left = seeded_left.stdout.split()[-1]
        passive = replace(settings, management_url="http://127.0.0.1:9")
        after = run("crawler", ["crawl", "--max-pages", "1", site.url()], passive)
    ended = crawls[_crawl_id(first.stderr)]
    assert ended["state"] == "finished", ended
    assert datetime.fromisoformat(ended["finished"]) <= first_ended
    assert ended["counts"][site.host] == {
        "ok": 4,
        "failed": 1,
        "retrying": 0,
        "dead": 0,
        "skipped": 0,
        "pending": 0,
    }
    assert crawls[_crawl_id(second.stderr)]["state"] == "finished"
    assert process.returncode == 130, err
    interrupted = crawls[_crawl_id(err)]
    assert interrupted["state"] == "interrupted" and interrupted["finished"] is not None, interrupted
    assert f"crawl {interrupted['id']} interrupted" in err
    assert after.returncode == 0, after.stderr
    # The seed's one at least (and what the interrupted crawl left, if it left some).
    assert re.search(
        r"crawler crawl: [1-9][0-9]* messages of earlier crawls were queued already", after.stderr
    ), f"{seeded_left.stdout}{seeded_left.stderr}\n{after.stderr}"
    # Its leftovers crawled by that run, the other crawl's work is over: finished, then.
    assert _crawls(settings)[left]["state"] == "finished"


def test_reading_commands_create_no_database_and_options_go_before_the_command_too(
    tmp_path: Path, amqp_url: str, prefix: str
) -> None:
    [site] = shops(products=1, hosts=["a.test"])
    config = write_config(tmp_path / "d.yaml", [site])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    database = elsewhere / "crawl.db"
    settings = replace(
        settings_for(amqp_url, prefix, f"sqlite:///{database}", config), config_path="nowhere.yaml"
    )
    for args in (
        ["export"],
        ["--config", str(config), "status"],
        ["crawls", "--config", str(config), "list"],
    ):
        refused = run("crawler", args, settings)
        assert refused.returncode == 2, refused.stderr
        assert refused.stderr.strip().splitlines() == [
            f"crawler: error: no database at {database}: run `crawler db upgrade` (or set "
            "CRAWLER_DATABASE_URL to the crawl's database)"
        ]
        assert not database.exists()
    # An empty database (made by another program): still no schema made by a read.
    sa.create_engine(f"sqlite:///{database}").connect().close()
    refused = run("crawler", ["-v", "--config", str(config), "status"], settings)
    assert refused.returncode == 2 and "has no crawler schema: run `crawler db upgrade`" in refused.stderr
    with engine_of(f"sqlite:///{database}") as conn:
        assert sa.inspect(conn).get_table_names() == []
    upgraded = run("crawler", ["-v", "db", "upgrade"], settings)
    assert upgraded.returncode == 0 and "alembic" not in upgraded.stderr.lower(), upgraded.stderr
    listed = run("crawler", ["--config", str(config), "crawls", "list"], settings)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.splitlines() == [
        "id                state        started               ended                 ok failed retrying dead "
        "skipped pending  label"
    ]
