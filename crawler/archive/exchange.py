"""What the archive is given (one request and its answer) and where it puts it."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Archived:
    """Where an exchange's records are: a file of the archive directory and their byte range (the
    response, or revisit, first); its payload's digest and date, which a later revisit refers to."""

    file: str
    offset: int
    length: int
    digest: str  # WARC-Payload-Digest, "sha1:BASE32"
    date: str  # WARC-Date
    revisit: bool = False  # written as a revisit: the content is still that of the record referred to


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request and the answer it got. `body` is the payload with its transfer and content codings
    undone; `rendered` a browser's DOM of it (render_js); `previous` the page's stored record, which a
    304 or the same payload again is written as a revisit of."""

    url: str
    status: int
    headers: Sequence[tuple[str, str]]
    body: bytes
    request_headers: Sequence[tuple[str, str]]
    fetched_at: datetime
    truncated: bool = False  # the body was not read (an answer that is not HTML): headers only
    raw: bool = True  # False: no answer as the site sent it (a fetch service gave only its DOM)
    rendered: bytes | None = None
    previous: Archived | None = None


def payload_digest(body: bytes) -> str:
    """A payload's digest as WARC-Payload-Digest writes it (and warcio computes it)."""
    return "sha1:" + base64.b32encode(hashlib.sha1(body).digest()).decode("ascii")
