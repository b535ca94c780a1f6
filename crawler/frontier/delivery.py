"""A delivery from a frontier queue as the worker holds it, and whether the broker has it back."""

from __future__ import annotations

from typing import TypeAlias

from aio_pika.abc import AbstractIncomingMessage
from aio_pika.exceptions import ChannelInvalidStateError

Delivery: TypeAlias = AbstractIncomingMessage
"""One message delivered from a domain queue: its body, headers and delivery tag, acked or returned."""


def lost(message: Delivery) -> bool:
    """Whether the channel `message` came on has closed: the broker has it back, unacked."""
    try:
        return message.channel.is_closed
    except ChannelInvalidStateError:  # aio-pika's answer for a closed channel
        return True
