"""A `lastmod` (W3C datetime), Atom `updated` (RFC 3339) or RSS `pubDate` (RFC 822) as a UTC datetime.

W3C datetime is ISO 8601 cut to YYYY, YYYY-MM, YYYY-MM-DD or a date and time with an offset; a time
without an offset (common, though the profile wants one) is taken as UTC. Anything else is None:
a bad date drops the date, never the URL.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

_YEAR_MONTH = re.compile(r"(\d{4})(?:-(\d{2}))?")
_LONGEST = 64  # the longest date a site writes is ~40 characters; parsing longer text wastes time


def parse_lastmod(text: str | None) -> datetime | None:
    """`text` as a timezone-aware UTC datetime, or None if it is no date these formats spell."""
    if not text:
        return None
    text = text.strip()
    if not text or len(text) > _LONGEST:
        return None
    moment: datetime
    try:
        if partial := _YEAR_MONTH.fullmatch(text):
            return datetime(int(partial[1]), int(partial[2] or 1), 1, tzinfo=UTC)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            moment = parsedate_to_datetime(text)
        return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
