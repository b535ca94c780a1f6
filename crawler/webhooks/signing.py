"""A delivery's signature, as Stripe signs its webhooks: `Crawler-Signature: t=TIMESTAMP,v1=HEX`, the
HMAC-SHA256 with the receiver's secret of `TIMESTAMP.` and the body. The timestamp inside what is
signed lets a receiver refuse an old delivery played again."""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "Crawler-Signature"
TOLERANCE = 300  # seconds: a delivery older than this is refused by `verify`


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """The Crawler-Signature header's value for `body` sent at `timestamp` (Unix seconds)."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def verify(
    secret: str, header: str, body: bytes, tolerance: float = TOLERANCE, now: float | None = None
) -> bool:
    """True if `header` signs `body` with `secret` within `tolerance` seconds of `now`."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body).rpartition("v1=")[2]
    return hmac.compare_digest(expected, fields.get("v1", ""))
