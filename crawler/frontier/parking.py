"""Parking a message that is not done: a retry tier after its delay, or the dead queue with its reason."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aio_pika.abc import AbstractExchange, AbstractIncomingMessage

from crawler import names as hdr
from crawler.frontier.message import persistent
from crawler.frontier.retry import Delay, Failure
from crawler.frontier.tracing import step
from crawler.names import delay_label, host_wait_label


def attempts_of(message: AbstractIncomingMessage) -> int:
    """How many times the message was tried before this delivery (its header; 0 if absent or bad)."""
    value = (message.headers or {}).get(hdr.HEADER_ATTEMPTS, 0)
    return value if isinstance(value, int) and value >= 0 else 0


def parked_before(message: AbstractIncomingMessage) -> bool:
    """Whether the message is a copy back from a retry tier (its attempts count may not say so: one
    parked for the crawler's own trouble keeps its count)."""
    return hdr.HEADER_RETRY_TIER in (message.headers or {})


def turn_of(message: AbstractIncomingMessage) -> float | None:
    """When a page set to wait for its host's token was told its turn comes (None: not told)."""
    value = (message.headers or {}).get(hdr.HEADER_TURN)
    return value / 1000 if isinstance(value, int) and not isinstance(value, bool) else None


class Parking:
    """Publishes copies of a message to the retry exchange or the dead queue, with why in headers."""

    def __init__(self, retry: AbstractExchange, dead: AbstractExchange, label: str) -> None:
        self._retry = retry
        self._dead = dead
        self._label = label

    async def retry(
        self, message: AbstractIncomingMessage, domain: str, attempts: int, delay: Delay, failure: Failure
    ) -> None:
        """Send a copy to the retry tier `delay` names; it comes back to its queue when it expires."""
        headers = self._headers(message, domain, attempts, failure)
        headers[hdr.HEADER_RETRY_TIER] = delay_label(delay.tier)
        copy = persistent(message.body, message.priority or 0, headers)
        copy.expiration = delay.seconds
        await self._retry.publish(copy, routing_key=message.routing_key or "")

    async def wait(self, message: AbstractIncomingMessage, seconds: float, turn: float) -> None:
        """Send a copy to the host wait queue of `seconds` (crawler/frontier/hosts.py), its tries and
        headers as they were and its `turn`: it comes back to its shard when it expires."""
        headers = dict(message.headers or {})
        headers[hdr.HEADER_RETRY_TIER] = host_wait_label(seconds)
        # In milliseconds: a float header goes as AMQP's 32-bit float, 128 s apart at today's time.
        headers[hdr.HEADER_TURN] = round(turn * 1000)
        copy = persistent(message.body, message.priority or 0, headers)
        await self._retry.publish(copy, routing_key=message.routing_key or "")

    async def dead(
        self, message: AbstractIncomingMessage, domain: str, attempts: int, failure: Failure
    ) -> None:
        """Set a copy aside in the dead queue, its reason in its headers."""
        headers = self._headers(message, domain, attempts, failure)
        copy = persistent(message.body, message.priority or 0, headers)
        await self._dead.publish(copy, routing_key=message.routing_key or "")
        step("dead", message, f" {failure.reason}: {failure.error}")

    def _headers(
        self, message: AbstractIncomingMessage, domain: str, attempts: int, failure: Failure
    ) -> dict[str, Any]:
        headers = dict(message.headers or {})
        headers.update(
            {
                hdr.HEADER_ATTEMPTS: attempts,
                hdr.HEADER_REASON: failure.reason,
                hdr.HEADER_ERROR: failure.error[:1000],
                hdr.HEADER_STATUS: failure.status_code or 0,
                hdr.HEADER_DOMAIN: domain,
                hdr.HEADER_CONSUMER: self._label,
                hdr.HEADER_TIME: datetime.now(UTC).isoformat(timespec="seconds"),
            }
        )
        return headers
