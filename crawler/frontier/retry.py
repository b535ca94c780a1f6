"""What a failure means: transient or permanent, and when a transient one is tried again."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from crawler.errors import FetchError, ResolveFailed

TRANSIENT_STATUSES = frozenset({408, 425, 429, 500, 502, 503, 504})
# A tier's queue holds messages up to this factor longer than its delay, so a per-message expiry
# can add jitter upward: a retry is never sooner than its delay, at most this much later.
JITTER = 1.25


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a try did not succeed."""

    reason: str  # "transient", "permanent" or "invalid"
    error: str
    status_code: int | None = None
    retry_after: float | None = None

    @property
    def transient(self) -> bool:
        """True if trying again later may succeed."""
        return self.reason == "transient"


def from_status(status: int, retry_after: str | None, now: datetime | None = None) -> Failure | None:
    """The failure an HTTP status stands for, or None for a success."""
    if status < 400:
        return None
    text = f"HTTP {status}"
    if status in TRANSIENT_STATUSES:
        return Failure("transient", text, status, parse_retry_after(retry_after, now))
    return Failure("permanent", text, status)


def from_error(exc: FetchError) -> Failure:
    """The failure a fetch error stands for; a name that cannot be resolved now comes back no sooner
    than the fleet's DNS cache asks again."""
    retry_after = exc.retry_after if isinstance(exc, ResolveFailed) and exc.retry_after > 0 else None
    return Failure("transient" if exc.transient else "permanent", str(exc), exc.status_code, retry_after)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (seconds or an HTTP date), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True, slots=True)
class Delay:
    """When a retry comes back: its tier's queue and its own expiry within that tier."""

    tier: float
    seconds: float


def next_delay(
    delays: tuple[float, ...],
    attempts: int,
    tiers: tuple[float, ...],
    retry_after: float | None = None,
    max_retry_after: float = 300.0,
) -> Delay | None:
    """The delay before try `attempts + 1`, or None when the retries are used up."""
    if attempts > len(delays):
        return None
    wanted = delays[attempts - 1]
    if retry_after is not None:
        wanted = max(wanted, min(retry_after, max_retry_after))
    tier = next((t for t in tiers if t * JITTER >= wanted), tiers[-1])
    return Delay(tier, min(wanted * random.uniform(1.0, JITTER), tier * JITTER))
