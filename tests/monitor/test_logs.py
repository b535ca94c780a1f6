"""Log lines: one per outcome with its fields, as text or JSON, passwords redacted in both."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.monitor import logs
from crawler.monitor.logs import setup
from demo.site import serve
from tests.support.crawls import seed
from tests.support.services import run, settings_for
from tests.support.sites import reachable, shops, write_config

SECRET_URL = "amqp://crawler:hunter2@rabbit.example:5672/"


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def outcome_line(logger: logging.Logger) -> None:
    logs.outcome(
        logger,
        "failed",
        url="http://a.test/p",
        domain="a.test",
        status=None,
        seconds=0.25,
        attempt=2,
        error=f"cannot reach {SECRET_URL}",
    )


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_carry_the_outcome_fields_and_no_password(capsys: pytest.CaptureFixture[str]) -> None:
    setup(verbose=True, fmt="json")
    logger = logging.getLogger("crawler.consumer")
    outcome_line(logger)
    logging.getLogger("crawler").warning("broker %s away", SECRET_URL)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2
    first, second = (json.loads(line) for line in lines)
    assert first["level"] == "INFO" and first["logger"] == "crawler.consumer"
    assert {k: first[k] for k in ("outcome", "url", "domain", "status", "duration", "attempt")} == {
        "outcome": "failed",
        "url": "http://a.test/p",
        "domain": "a.test",
        "status": None,
        "duration": 0.25,
        "attempt": 2,
    }
    assert "hunter2" not in lines[0] and "crawler:***@rabbit.example" in first["error"]
    assert second["message"] == "broker amqp://crawler:***@rabbit.example:5672/ away"
    assert "time" in second and "hunter2" not in lines[1]


@pytest.mark.usefixtures("restore_logging")
def test_text_lines_say_the_same_and_hide_the_password(capsys: pytest.CaptureFixture[str]) -> None:
    setup(verbose=True, fmt="text")
    outcome_line(logging.getLogger("crawler.consumer"))
    [line] = capsys.readouterr().err.splitlines()
    assert "failed a.test - http://a.test/p 0.250s attempt=2 error=cannot reach amqp://crawler:***@" in line
    assert "hunter2" not in line


def test_json_formatter_includes_exceptions_redacted() -> None:
    try:
        raise RuntimeError(f"down: {SECRET_URL}")
    except RuntimeError:
        record = logging.LogRecord("test", logging.ERROR, __file__, 1, "oops", None, sys.exc_info())
    data = json.loads(logs.JsonFormatter().format(record))
    assert "RuntimeError" in data["exception"] and "hunter2" not in data["exception"]


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="xml"):
        logs.formatter("xml")


async def test_a_worker_logs_one_json_object_per_outcome(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=4, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites):
        await seed(settings, sites[0].url())
        result = run("crawler-consume", ["--burst", "-v", "--log-format", "json"], settings)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stderr.splitlines()]  # every line is one object
    outcomes = [r for r in records if "outcome" in r]
    assert sorted(r["url"] for r in outcomes) == sorted(reachable(sites))
    for r in outcomes:
        assert r["domain"] == "a.test" and r["attempt"] == 1 and r["duration"] >= 0
        assert (r["outcome"], r["status"]) == (
            ("failed", 404) if r["url"].endswith("/missing") else ("ok", 200)
        )
    assert "guest:guest" not in result.stderr
