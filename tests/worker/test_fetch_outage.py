"""A fetch service that is down spends no page's try: its domains pause with their pages queued, and a
burst gives up after `outage_limit` seconds of outage, its messages left for the next run."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from crawler.config import load_config
from crawler.frontier.exchanges import host_queues
from crawler.names import DISCOVERED_LABEL, Names
from crawler.sink.sql import migrate
from crawler.worker import wiring
from crawler.worker.tuning import Tuning
from tests.support.crawls import dead_letters, stored
from tests.support.services import queue_depth, settings_for


@pytest.fixture
def closed() -> Iterator[int]:
    """A port bound but never listened on: the fetch service there refuses every connection."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.mark.timeout(90)
async def test_a_burst_gives_up_on_a_fetch_service_down_with_every_page_still_queued(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, closed: int
) -> None:
    path = tmp_path / "d.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"fetch": "api", "obey_robots": False, "sitemaps": False, "retry_delays": [0.2]},
                "domains": {"a.test": {}},
                # A discovered host's pages wait in the host layout's shards, held as one.
                "discover": {"follow": "all", "allow": [".test"]},
                "resolve": {"a.test": "127.0.0.21", "b.test": "127.0.0.21"},
                "allow_private_networks": True,
            }
        )
    )
    config = load_config(path)
    settings = replace(
        settings_for(amqp_url, prefix, sqlite_url, path),
        fetch_api_url=f"http://127.0.0.1:{closed}/fetch",
        fetch_api_key="k-0123456789abcdef",
    )
    await asyncio.to_thread(migrate, sqlite_url)
    consumed = await wiring.consume(
        settings,
        config,
        burst=True,
        seeds=["http://a.test/", "http://b.test/"],
        tuning=Tuning(outage_limit=2.0, drain_poll=0.05),
    )
    halted = consumed.ending.halted
    assert set(halted) == {"a.test", DISCOVERED_LABEL}, halted
    assert all("cannot reach the fetch service" in why and "down for" in why for why in halted.values())
    # No page was the service's victim: none stored, none set aside, both back in their queues.
    assert stored(sqlite_url) == []
    assert await dead_letters(settings) == []
    names = Names(prefix)
    assert await queue_depth(amqp_url, names.domain_queue("a.test")) == 1
    # In its shard, or waiting out its host's next token in a wait queue that returns it there.
    assert sum([await queue_depth(amqp_url, q.name) for q in host_queues(config, names)]) == 1
    assert consumed.stats["a.test"].failed == consumed.stats["a.test"].retried == 0
