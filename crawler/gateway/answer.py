"""What the gateway answers a request, whichever form renders it (crawler/gateway/forms.py): the
target's answer, the target's failure, or the gateway's own refusal.

A failure's text is fixed by its kind, never an exception's own (which may name a proxy, its
credentials or an address behind the gateway): it carries an error id, and the gateway's log line
with that id says what happened.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from crawler.errors import ConnectFailed, FetchError, FetchTimeout, Refused, TooLarge, TooManyRedirects

# The kinds of the gateway's own answers (kept apart from the target's: docs/gateway.md).
BAD_REQUEST = "bad_request"
KEY = "key"
BUDGET = "budget"
CONCURRENCY = "concurrency"
NO_EXIT = "no_exit"

# A target that could not be fetched, by the FetchError that said so (first match wins).
_FAILURES: tuple[tuple[type[FetchError], str], ...] = (
    (FetchTimeout, "timeout"),
    (ConnectFailed, "connect"),
    (Refused, "refused"),
    (TooLarge, "too_large"),
    (TooManyRedirects, "too_many_redirects"),
)
# What a client is told of each kind of failure (the log says the rest, under the error id).
TEXTS = {
    "timeout": "the target gave no answer in time",
    "connect": "cannot connect to the target",
    "refused": "refused: the target's address is not public, or a redirect left http(s)",
    "too_large": "the body exceeds max_body_bytes",
    "too_many_redirects": "more redirects than the gateway follows",
    "bad_response": "the target's answer could not be read",
}
log = logging.getLogger("crawler.gateway")


def error_id() -> str:
    """A new id for one failure: in the client's answer and in the gateway's log line about it."""
    return secrets.token_hex(6)


def explained(text: str, detail: str, url: str) -> str:
    """`text` with a new error id, after logging `detail` (for the gateway's operator) under it."""
    ref = error_id()
    log.warning("error %s for %s: %s", ref, url[:300], detail)
    return f"{text} (error {ref}: the gateway's log says why)"


class Rest(Protocol):
    """The rest of a body, still coming from its exit; finishing it charges the answer if it was
    passed on whole, and releases the exit either way."""

    deadline: float  # monotonic: the stream must be over by then

    def __aiter__(self) -> AsyncIterator[bytes]:
        """The body's remaining pieces, decoded."""
        ...

    async def finish(self, whole: bool) -> None:
        """The stream ended, passed on `whole` or not; idempotent."""
        ...


@dataclass(frozen=True, slots=True)
class Page:
    """The target's answer: its status and headers, the body (all of it, or its head and the rest
    still streaming), where it came from and what it cost."""

    status: int
    initial_status: int  # the first response's (a redirect's, when the gateway followed one)
    headers: list[tuple[str, str]]
    head: bytes
    rest: Rest | None
    final_url: str
    credits: float
    exit: str
    rendered: bool
    started: float
    document: bytes | None = None  # a rendered page's document as the site sent it, when asked for

    @property
    def code(self) -> int:
        """The gateway's own status for it (its metric's label): the target answered."""
        return 200

    async def close(self) -> None:
        """Release what a stream still holds (uncharged unless it was finished whole)."""
        if self.rest is not None:
            await self.rest.finish(False)


@dataclass(frozen=True, slots=True)
class Failed:
    """The target could not be fetched (never charged): `kind` says why."""

    kind: str
    message: str
    status: int | None
    started: float

    @classmethod
    def of(cls, exc: FetchError, started: float, url: str) -> Failed:
        """The failure a FetchError reports, in a fixed text with an error id the log explains."""
        kind = next((k for t, k in _FAILURES if isinstance(exc, t)), "bad_response")
        return cls(kind, explained(TEXTS[kind], str(exc), url), exc.status_code, started)

    @property
    def code(self) -> int:
        """The gateway's own status for it: it answered, for the target."""
        return 200

    async def close(self) -> None:
        """Nothing is held."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """The gateway's own answer: the request was bad or its key refused, or no exit could carry it."""

    status: int
    kind: str
    message: str
    retry_after: int | None = None

    @property
    def code(self) -> int:
        """The gateway's own status."""
        return self.status

    async def close(self) -> None:
        """Nothing is held."""


GatewayAnswer = Page | Failed | Refusal
