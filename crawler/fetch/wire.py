"""The moment a request goes on the wire, told by the transport to whoever paced it: a token is due
before the fetch starts, but connecting, resolving or a busy event loop may send it later, and then
its pacing may hold it back (crawler/fetch/ratelimit.py, `sending`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

OnWire = Callable[[], Awaitable[None]]
"""Called once, just before a request's headers go out; the request waits for it to return."""

# Context-local, so the hook follows the one request its caller paced through every fetcher layer
# (archiving, routing, redirects) without each passing it on; a task started inside copies it.
_ON_WIRE: ContextVar[OnWire | None] = ContextVar("crawler_on_wire", default=None)


@contextmanager
def paced(hook: OnWire | None) -> Iterator[None]:
    """Within: the next request a transport sends calls `hook` as it goes (None: nothing is told)."""
    token = _ON_WIRE.set(hook)
    try:
        yield
    finally:
        _ON_WIRE.reset(token)


async def going() -> None:
    """A transport's request is going out now: tell its pacing, once (a second request is not it),
    and return when the pacing lets it go."""
    hook = _ON_WIRE.get()
    if hook is not None:
        _ON_WIRE.set(None)
        await hook()


async def httpcore_trace(event: str, info: dict[str, Any]) -> None:
    """httpx's `trace` request extension: the request's headers are about to be written."""
    if event.endswith(".send_request_headers.started"):
        await going()
