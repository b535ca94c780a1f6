"""A delivery held longer than RabbitMQ's consumer_timeout closes its channel and is delivered again:
no fetch may start that could not end before it, so the work is never done twice."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from crawler.config import parse_config
from crawler.errors import ConfigError
from demo.site import Site, free_port, page, serve
from tests.support.crawls import consumer, finish, seed, stored
from tests.support.services import settings_for
from tests.support.sites import IPS

CONSUMER_TIMEOUT_MS = 8000  # the broker's, for this test only
DELIVERY_TIMEOUT = 6.0  # domains.yaml's: below the broker's, slack for a loaded machine


def _broker_env(key: str, value: int) -> None:
    subprocess.run(
        ["rabbitmqctl", "eval", f"application:set_env(rabbit, {key}, {value})."],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _broker_get(key: str) -> int:
    out = subprocess.run(
        ["rabbitmqctl", "eval", f"application:get_env(rabbit, {key})."],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return int(out.strip().removeprefix("{ok,").removesuffix("}"))


@pytest.fixture
def short_consumer_timeout() -> Iterator[None]:
    """RabbitMQ closes a channel whose delivery is unacked for 4 s (checked every second), for channels
    opened during the test; the node's own settings come back after."""
    before = _broker_get("consumer_timeout"), _broker_get("channel_tick_interval")
    _broker_env("consumer_timeout", CONSUMER_TIMEOUT_MS)
    _broker_env("channel_tick_interval", 500)
    try:
        yield
    finally:
        _broker_env("consumer_timeout", before[0])
        _broker_env("channel_tick_interval", before[1])


def test_a_fetch_deadline_that_cannot_fit_the_delivery_timeout_is_refused_at_load() -> None:
    text = "delivery_timeout: 60\ndefaults: {timeout: 59}\ndomains: {a.test: {timeout: 5}}\n"
    with pytest.raises(ConfigError, match=r"defaults: timeout 59s does not fit in delivery_timeout 60s"):
        parse_config(text)
    text = "delivery_timeout: 60\ndomains: {a.test: {timeout: 55}}\n"
    with pytest.raises(ConfigError, match=r"domains.a.test: timeout 55s .* raise consumer_timeout"):
        parse_config(text)
    assert parse_config("delivery_timeout: 60\ndomains: {a.test: {timeout: 50}}\n").delivery_margin == 6
    # A domain with content on keeps room for its content job too.
    text = "delivery_timeout: 60\ndomains: {a.test: {timeout: 25, content: on}}\n"
    with pytest.raises(ConfigError, match=r"timeout 25s and its content.s 30s does not fit"):
        parse_config(text)
    config = parse_config("delivery_timeout: 100\ndomains: {a.test: {timeout: 20, content: on}}\n")
    assert config.start_by(0.0, config.rules["a.test"]) == 100 - 10 - 20 - 30


@pytest.mark.timeout(180)
async def test_deliveries_waiting_for_tokens_past_the_delivery_timeout_are_returned_unfetched(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, short_consumer_timeout: None
) -> None:
    pages = 12
    ip = IPS["a.test"]
    site = Site(
        "a.test",
        ip,
        free_port(ip),
        {
            "/": page("home", [f"/p/{i}" for i in range(pages)]),
            **{f"/p/{i}": page(f"p{i}", []) for i in range(pages)},
        },
    )
    config = {
        # 2 pages a second, shared by two consumers holding up to 16 deliveries each: most would
        # wait far past the broker's 4 s for their token.
        "delivery_timeout": DELIVERY_TIMEOUT,
        "defaults": {"rate": 2, "burst": 1, "prefetch": 16, "timeout": 1, "obey_robots": False},
        "resolve": {"a.test": ip},
        "allow_private_networks": True,
        "domains": {"a.test": {}},
    }
    path = tmp_path / "d.yaml"
    path.write_text(yaml.safe_dump(config))
    settings = settings_for(amqp_url, prefix, sqlite_url, path)
    with serve(site):
        await seed(settings, site.url())
        workers = [consumer(settings, "--burst") for _ in range(2)]
        logs = "".join(await asyncio.to_thread(finish, *workers, timeout=150))
    # Every page fetched once: no channel was closed under a fetch, no work was done twice.
    assert {path: site.hits(path) for path in site.routes} == dict.fromkeys(site.routes, 1)
    assert sorted(r[0] for r in stored(sqlite_url)) == sorted(site.url(p) for p in site.routes)
    assert "PRECONDITION_FAILED" not in logs and "acknowledgement timed out" not in logs, logs
    assert "returned unfetched, too late to finish within delivery_timeout" in logs  # it had to act
