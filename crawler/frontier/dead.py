"""The dead queue, for a person: list what was set aside and why, replay it, or purge it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractRobustConnection

from crawler import names as hdr
from crawler.connections import publishing_channel
from crawler.frontier.exchanges import host_of_key
from crawler.frontier.message import persistent
from crawler.names import Names

# Headers that describe a failure; a replayed message starts afresh without them.
_FAILURE_HEADERS = (
    hdr.HEADER_ATTEMPTS,
    hdr.HEADER_REASON,
    hdr.HEADER_ERROR,
    hdr.HEADER_STATUS,
    hdr.HEADER_CONSUMER,
    hdr.HEADER_TIME,
    hdr.HEADER_RETRY_TIER,
)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One message in the dead queue, as a person reads it."""

    url: str
    domain: str
    reason: str
    attempts: int
    status: int
    error: str
    consumer: str
    time: str

    @classmethod
    def of(cls, message: AbstractIncomingMessage) -> DeadLetter:
        """Read a dead message's body and headers; tolerate anything (it may be garbage)."""
        headers = message.headers or {}
        try:
            body = json.loads(message.body)
            url = str(body["url"]) if isinstance(body, dict) and "url" in body else ""
        except ValueError:
            url = ""
        if not url:
            url = message.body[:200].decode("utf-8", "replace")

        def text(name: str) -> str:
            value = headers.get(name, "")
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)

        def number(name: str) -> int:
            value = headers.get(name, 0)
            return value if isinstance(value, int) else 0

        # Dead-lettered by RabbitMQ itself (a consumer's reject, a quorum queue's delivery limit):
        # its own x-death says why.
        reason = text(hdr.HEADER_REASON) or _death_reason(headers.get("x-death"))
        return cls(
            url=url,
            domain=text(hdr.HEADER_DOMAIN) or host_of_key(message.routing_key or ""),
            reason=reason,
            attempts=number(hdr.HEADER_ATTEMPTS),
            status=number(hdr.HEADER_STATUS),
            error=text(hdr.HEADER_ERROR),
            consumer=text(hdr.HEADER_CONSUMER),
            time=text(hdr.HEADER_TIME),
        )


def _death_reason(deaths: object) -> str:
    """RabbitMQ's reason for its latest dead-lettering of a message (rejected, delivery_limit...)."""
    if not isinstance(deaths, list | tuple) or not deaths or not isinstance(deaths[0], dict):
        return "unknown"
    reason = deaths[0].get("reason", "rejected")
    return reason.decode("utf-8", "replace") if isinstance(reason, bytes) else str(reason)


Match = Callable[[DeadLetter], bool]


def matcher(domain: str | None = None, reason: str | None = None) -> Match:
    """A filter on domain (a domain covers its subdomains) and reason."""

    def match(letter: DeadLetter) -> bool:
        if reason and letter.reason != reason:
            return False
        return not domain or letter.domain == domain or letter.domain.endswith("." + domain)

    return match


async def _scan(
    channel: AbstractChannel, names: Names, on_message: Callable[[AbstractIncomingMessage, DeadLetter], Any]
) -> None:
    # Messages taken but not acked go back to the queue, in order, when the channel closes.
    queue = await channel.declare_queue(names.dead, durable=True, passive=True)
    count = queue.declaration_result.message_count or 0
    taken = 0
    while taken < count:
        message = await queue.get(no_ack=False, fail=False)
        if message is None:
            break
        taken += 1
        await on_message(message, DeadLetter.of(message))


# Dead letters one page looks through past where it starts, matching or not: a page never reads the
# whole dead queue, however long it is; `next` says where to go on from.
SCAN_MOST = 5_000


@dataclass(frozen=True, slots=True)
class DeadPage:
    """One page of dead letters, oldest first, and the position the next page starts at (None: the
    queue's end). Positions count from the queue's head, which replays and purges move."""

    letters: list[DeadLetter]
    next: int | None


async def page_dead(
    connection: AbstractRobustConnection, names: Names, match: Match, limit: int, after: int = 0
) -> DeadPage:
    """Up to `limit` matching dead letters from position `after` on, looking through at most
    SCAN_MOST messages; the queue is left as it was."""
    channel = await connection.channel()
    found: list[DeadLetter] = []
    position = 0
    try:
        # Messages taken but not acked go back to the queue, in order, when the channel closes.
        queue = await channel.declare_queue(names.dead, durable=True, passive=True)
        count = queue.declaration_result.message_count or 0
        while position < min(count, after + SCAN_MOST) and len(found) < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                count = position
                break
            position += 1
            if position > after:
                letter = DeadLetter.of(message)
                if match(letter):
                    found.append(letter)
    finally:
        await channel.close()
    return DeadPage(found, position if position < count else None)


async def list_dead(
    connection: AbstractRobustConnection, names: Names, match: Match, limit: int | None = None
) -> list[DeadLetter]:
    """The dead letters that match, oldest first; the queue is left as it was."""
    found: list[DeadLetter] = []
    channel = await connection.channel()
    try:

        async def keep(message: AbstractIncomingMessage, letter: DeadLetter) -> None:
            if match(letter) and (limit is None or len(found) < limit):
                found.append(letter)

        await _scan(channel, names, keep)
    finally:
        await channel.close()
    return found


async def replay(connection: AbstractRobustConnection, names: Names, match: Match) -> int:
    """Put matching dead letters back into their domain queues with attempts reset; how many."""
    channel = await publishing_channel(connection)
    replayed = 0
    try:
        frontier = await channel.get_exchange(names.frontier, ensure=False)

        async def put_back(message: AbstractIncomingMessage, letter: DeadLetter) -> None:
            nonlocal replayed
            if not match(letter):
                return
            headers = {k: v for k, v in (message.headers or {}).items() if k not in _FAILURE_HEADERS}
            headers.pop("x-death", None)
            copy = persistent(message.body, message.priority or 0, headers)
            copy.message_id = message.message_id  # a webhook's idempotency key: the same on replay
            await frontier.publish(copy, routing_key=message.routing_key or "")
            await message.ack()
            replayed += 1

        await _scan(channel, names, put_back)
    finally:
        await channel.close()
    return replayed


async def purge(connection: AbstractRobustConnection, names: Names, match: Match) -> int:
    """Delete matching dead letters for good; how many."""
    channel = await connection.channel()
    purged = 0
    try:

        async def drop(message: AbstractIncomingMessage, letter: DeadLetter) -> None:
            nonlocal purged
            if match(letter):
                await message.ack()
                purged += 1

        await _scan(channel, names, drop)
    finally:
        await channel.close()
    return purged
