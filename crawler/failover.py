"""A RabbitMQ connection over several nodes of a cluster: it reconnects to the next when one is lost."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from aio_pika import RobustConnection
from yarl import URL

# Back-off between reconnect attempts: doubling from FIRST to MOST seconds, each drawn at random
# from its upper half, so a fleet that lost a node does not knock on the next one all at once.
BACKOFF_FIRST = 0.2
BACKOFF_MOST = 5.0


def nodes(url: str) -> list[str]:
    """The node URLs of a CRAWLER_AMQP_URL: one URL, or several separated by commas."""
    return [part.strip() for part in url.split(",") if part.strip()]


def first_node(url: str) -> str:
    """The first node of a CRAWLER_AMQP_URL (all nodes of a cluster share users and vhosts)."""
    listed = nodes(url)
    return listed[0] if listed else url


def backoff(failures: int, draw: float) -> float:
    """Seconds to wait after `failures` failed attempts in a row; `draw` in [0, 1) is the jitter."""
    ceiling = min(BACKOFF_MOST, BACKOFF_FIRST * 2.0 ** min(failures, 16))
    return ceiling / 2 + ceiling / 2 * draw


class FailoverConnection(RobustConnection):
    """aio-pika's robust connection whose every reconnect attempt goes to the next node, backing off.

    aio-pika connects to `self.url` and sleeps `self.reconnect_interval` after each attempt; both are
    answered here from the node list and the failures so far. Channels, queues and consumers are
    restored on the new node as after any reconnect.
    """

    def __init__(self, urls: Sequence[str], start: int, **kwargs: Any) -> None:
        self._nodes = [URL(u) for u in urls]
        self._at = start % len(self._nodes)
        self._failures = 0
        self._draw = random.random()
        super().__init__(self._nodes[self._at], **kwargs)

    @property
    def url(self) -> URL:
        """The node this connection is on, or tries next."""
        return self._nodes[self._at]

    @url.setter
    def url(self, value: URL) -> None:  # aio-pika sets it at start and on update_secret
        self._nodes[self._at] = URL(value)

    @property
    def reconnect_interval(self) -> float:
        """Seconds aio-pika waits after an attempt before the next."""
        return backoff(self._failures, self._draw)

    @reconnect_interval.setter
    def reconnect_interval(self, value: float) -> None:  # aio-pika's own fixed interval: not used
        pass

    @property
    def transport(self) -> Any:
        """aio-pika's underlying connection; None between connections."""
        return self._transport

    @transport.setter
    def transport(self, value: Any) -> None:
        # aio-pika clears the transport when made, then as each connection attempt begins: from the
        # second attempt on (a reconnect, or a retry), the moment to turn to the next node. Should
        # it stop doing so, the connection keeps to its node, as a plain robust connection does.
        if value is None:
            self._clears += 1
            if self._clears > 2:
                self._turn()
        self._transport = value

    _clears = 0
    _transport: Any = None

    def _turn(self) -> None:
        if len(self._nodes) > 1:
            self._at = (self._at + 1) % len(self._nodes)
        self._failures += 1
        self._draw = random.random()

    async def _on_connected(self) -> None:
        await super()._on_connected()
        self._failures = 0
