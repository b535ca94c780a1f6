"""Whether a listed location is a URL to crawl: absolute (or resolved), http(s), with a host, not too long.

It is not canonicalised here: the caller's router does that, with the scope and host rules.
"""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

from crawler.parse.sitemaps.limits import MAX_URL_LENGTH

# Spaces pass (canonicalisation percent-encodes them); control characters never belong in a URL.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# The usual spelling, which urlsplit would pass: it is most of a sitemap, and urlsplit its cost.
_PLAIN = re.compile(r"https?://[a-z0-9.-]+(?::([0-9]{1,5}))?(?:[/?#][^\x00-\x20\x7f]*)?", re.IGNORECASE)

NO_LOC = "no loc"
TOO_LONG = "too long"
BAD_URL = "bad URL"
NOT_ABSOLUTE = "not absolute"
NOT_HTTP = "not http(s)"


def check_loc(loc: str, base: str | None) -> tuple[str, str | None]:
    """`loc` (resolved against `base`, if one is given) and why it is refused (None: it is not)."""
    loc = loc.strip()
    if not loc:
        return loc, NO_LOC
    if len(loc) > MAX_URL_LENGTH:
        return loc, TOO_LONG
    if (plain := _PLAIN.fullmatch(loc)) and (plain[1] is None or int(plain[1]) <= 65535):
        return loc, None
    if _CONTROL.search(loc):
        return loc, BAD_URL
    try:
        if base is not None and not loc[:8].lower().startswith(("http://", "https://")):
            loc = urljoin(base, loc)
        parts = urlsplit(loc)
        _ = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:
        return loc, BAD_URL
    scheme = parts.scheme.lower()
    if not scheme:
        return loc, NOT_ABSOLUTE
    if scheme not in ("http", "https"):
        return loc, NOT_HTTP
    if not parts.hostname:
        return loc, BAD_URL
    if len(loc) > MAX_URL_LENGTH:
        return loc, TOO_LONG
    return loc, None
