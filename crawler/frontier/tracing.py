"""Each delivery's way through a worker, one line per step on the trace logger (`--trace`): what a
soak's ledger shows for a URL it cannot account for. Free when off."""

from __future__ import annotations

import logging

from aio_pika.abc import AbstractIncomingMessage

from crawler.errors import InvalidMessage
from crawler.frontier.message import CrawlMessage
from crawler.names import TRACE_LOGGER

log = logging.getLogger(TRACE_LOGGER)


def step(what: str, message: AbstractIncomingMessage, detail: str = "") -> None:
    """One step of a delivery (delivered, acked, parked, dead, returned, dropped), if tracing."""
    if log.isEnabledFor(logging.DEBUG):
        redelivered = " redelivered" if message.redelivered else ""
        log.debug("%s %s tag=%s%s%s", what, url_of(message), message.delivery_tag, redelivered, detail)


def url_of(message: AbstractIncomingMessage) -> str:
    """The URL a message asks for, for a log line; its delivery tag if it cannot be read."""
    try:
        return CrawlMessage.decode(message.body).url
    except InvalidMessage:
        return f"#{message.delivery_tag}"
