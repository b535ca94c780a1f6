"""What a worker knows of its fetch service's health: the back-off its 429s asked for, and an outage:
failures of the service as a whole, which pause domains instead of spending their pages' tries,
reported once, then at most every REPORT_EVERY seconds (and when failures become an outage), until an
answer ends it."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from crawler.errors import (
    BackendBusy,
    BackendDown,
    BackendUnavailable,
    FetchBackendError,
    FetchError,
    FetchTimeout,
)

BUSY_FIRST = 0.25  # seconds of back-off after the service's first 429; doubling up to BUSY_MOST
BUSY_MOST = 30.0
# An outage fails every page in flight: say so once, then at most this often, not once a page.
REPORT_EVERY = 10.0
# Failures of the service in a row that make an outage; a connection it refuses makes one at once.
# Fewer could be one slow or odd page's doing, which must spend its own tries, not pause its domain.
OUTAGE_AFTER = 3
OUTAGE_PAUSE_FIRST = 1.0  # a domain's pause while the service is down: the outage so far, within these
OUTAGE_PAUSE_MOST = 30.0

log = logging.getLogger(__name__)


class ServiceHealth:
    """The fetch service's back-off and outage, as one worker's requests to it find them."""

    def __init__(self) -> None:
        self._busy_until = 0.0
        self._busy_strikes = 0
        self._failing = 0  # transient service failures since its last good answer
        self._failing_since = 0.0  # when the first of them came (monotonic)
        self._reported = -REPORT_EVERY
        self._reported_outage = False  # the last report said the failures make an outage

    @asynccontextmanager
    async def asking(self, url: str, deadline: float, *, streaming: bool) -> AsyncIterator[None]:
        """A request for `url` within `deadline`, past any back-off: the service's failures become the
        worker's errors, and its answer ends an outage. `streaming`: the target's body comes inside."""
        try:
            async with asyncio.timeout(deadline):
                await self._not_busy()
                yield
        except TimeoutError:
            if streaming:  # the service answered; the target's body was too slow to come through it
                raise FetchTimeout(
                    f"no complete answer through the fetch service within {deadline:g}s", url=url
                ) from None
            raise self._trouble(
                BackendUnavailable(f"the fetch service gave no answer within {deadline:g}s", url=url)
            ) from None
        except BackendUnavailable as exc:
            exc.url = exc.url or url
            raise self._trouble(exc) from None
        except FetchError as exc:
            exc.url = exc.url or url
            raise
        except (aiohttp.ClientError, OSError) as exc:
            down = isinstance(exc, aiohttp.ClientConnectorError | ConnectionRefusedError)
            broke = streaming and not down
            what = "the fetch service's answer broke off" if broke else "cannot reach the fetch service"
            raise self._trouble(BackendUnavailable(f"{what} ({why(exc)})", url=url), down=down) from None
        self._busy_strikes = 0
        if self._failing:
            log.warning("the fetch service answers again after %d failed fetches", self._failing)
            self._failing = 0
            self._reported_outage = False

    def _trouble(self, exc: BackendUnavailable, *, down: bool = False) -> FetchBackendError:
        """The service failed: the page is retried, unless the failures make an outage (`down`: one
        that cannot be anything else), which pauses its domain instead (BackendDown). Logged once,
        then every REPORT_EVERY s."""
        now = time.monotonic()
        if exc.transient:
            if not self._failing:
                self._failing_since = now
            self._failing += 1
        lasted = now - self._failing_since if self._failing else 0.0
        outage = exc.transient and (down or self._failing >= OUTAGE_AFTER)
        # A first failure (a connection the service reset) may have just been reported as retried:
        # the outage that follows within REPORT_EVERY is news, as its domains now pause.
        if now - self._reported >= REPORT_EVERY or (outage and not self._reported_outage):
            self._reported = now
            self._reported_outage = outage
            then = (
                "not retried"
                if not exc.transient
                else "its domains pause, their pages wait queued"
                if outage
                else "its pages are retried"
            )
            log.warning("%s (%s; %d failed fetches in %.0fs)", exc, then, self._failing, lasted)
        if not outage:
            return exc
        pause = min(max(OUTAGE_PAUSE_FIRST, lasted), OUTAGE_PAUSE_MOST)
        return BackendDown(str(exc), pause=pause, lasted=lasted, url=exc.url)

    async def _not_busy(self) -> None:
        """Wait out a back-off the service asked for with a 429 (the fetch's deadline bounds it)."""
        wait = self._busy_until - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)

    def busy(self, message: str) -> BackendBusy:
        """The service is at its concurrency limit: back off, longer at each 429 in a row."""
        self._busy_strikes += 1
        pause = min(BUSY_FIRST * 2 ** (self._busy_strikes - 1), BUSY_MOST) * random.uniform(1.0, 1.5)
        self._busy_until = max(self._busy_until, time.monotonic() + pause)
        return BackendBusy(f"the fetch service is at its concurrency limit: {message}")


def why(exc: BaseException) -> str:
    """What went wrong with the service, without the exception's own text: aiohttp's quotes the URL
    asked, and ScrapingBee's URL carries the key (api_key=)."""
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{type(exc).__name__}: {exc.status} {exc.message[:100]}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"{type(exc).__name__}: {exc.host}:{exc.port} {exc.strerror or ''}".rstrip()
    return type(exc).__name__
