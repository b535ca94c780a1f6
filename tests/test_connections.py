"""Connections to the services: the AMQP heartbeat asked for, and the outage log lines."""

from __future__ import annotations

import logging

import pytest

from crawler import connections
from crawler.connections import AMQP_HEARTBEAT, with_heartbeat
from tests.support import services
from tests.support.wait import until


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "amqp://guest:guest@localhost:5672/",
            f"amqp://guest:guest@localhost:5672/?heartbeat={AMQP_HEARTBEAT}",
        ),
        ("amqp://h/v?frame_max=8192", f"amqp://h/v?frame_max=8192&heartbeat={AMQP_HEARTBEAT}"),
        ("amqp://h/v?heartbeat=5", "amqp://h/v?heartbeat=5"),  # the URL's own wins
        ("amqp://h/v?heartbeat=0", "amqp://h/v?heartbeat=0"),
    ],
)
def test_the_crawler_asks_for_its_heartbeat_unless_the_url_names_one(url: str, expected: str) -> None:
    assert with_heartbeat(url) == expected


async def test_a_lost_broker_connection_is_one_line_and_its_return_another(
    amqp_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="crawler.connections")
    async with connections.broker(amqp_url, "probe") as connection:
        assert connection.transport is not None
        assert connection.transport.connection.heartbeat_timeout == AMQP_HEARTBEAT
        await services.close_connection(amqp_url)
        await until(lambda: "RabbitMQ connection (probe) back" in caplog.text, within=30, what="back")
    lines = [r.getMessage() for r in caplog.records if r.name == "crawler.connections"]
    assert len(lines) == 2, lines  # its own close at the end is not a loss
    assert lines[0].startswith("RabbitMQ connection (probe) lost: ") and "CONNECTION_FORCED" in lines[0]
    assert lines[1].startswith("RabbitMQ connection (probe) back after ")
