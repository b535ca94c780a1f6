"""URL canonicalisation and fingerprints: one spelling per page, so dedup and the sink agree."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection
from functools import lru_cache
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

from w3lib.url import canonicalize_url

from crawler.errors import BadURL
from crawler.names import LINKS_REMEMBERED

MAX_URL_LENGTH = 2048  # PostgreSQL indexes at most ~2.7 kB per unique key
DEFAULT_TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "dclid", "msclkid", "yclid", "mc_cid", "mc_eid", "_ga", "igshid"}
)
_DEFAULT_PORTS = {"http": 80, "https": 443}
# After IDNA: a DNS name (underscores occur in the wild) or an IPv6 literal; nothing else.
_HOST = re.compile(r"[a-z0-9_.-]+|[0-9a-f:.]+")


def _is_tracking(key: str, extra: Collection[str]) -> bool:
    key = key.lower()
    return key.startswith("utm_") or key in DEFAULT_TRACKING_PARAMS or key in extra


def canonicalise(url: str, base: str | None = None, tracking: Collection[str] = ()) -> str:
    """The canonical form of `url` (resolved against `base`); raise BadURL if it cannot be crawled.

    Lower-cases scheme and host (never the path), drops the fragment, default port, credentials and
    tracking parameters, and sorts the query.
    """
    text = url.strip()
    if not text:
        raise BadURL("empty URL")
    if len(text) > MAX_URL_LENGTH:
        raise BadURL(f"URL longer than {MAX_URL_LENGTH} characters")
    try:
        if base is not None:
            text = urljoin(base, text)
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme not in _DEFAULT_PORTS:
            raise BadURL(f"{url!r}: only http and https URLs can be crawled")
        if not parts.hostname:
            raise BadURL(f"{url!r}: no host")
        port = parts.port
        canon = urlsplit(canonicalize_url(text, keep_blank_values=True))
        host = canon.hostname
    except BadURL:
        raise
    except (ValueError, UnicodeError) as exc:
        raise BadURL(f"{url!r}: not a valid URL ({exc})") from None
    if not host or not _HOST.fullmatch(host):
        raise BadURL(f"{url[:200]!r}: invalid host")
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != _DEFAULT_PORTS[scheme]:
        netloc = f"{netloc}:{port}"
    query = "&".join(
        pair
        for pair in canon.query.split("&")
        if pair and not _is_tracking(unquote(pair.partition("=")[0]), tracking)
    )
    canonical = urlunsplit((scheme, netloc, _drop_path_params(canon.path, tracking) or "/", query, ""))
    if len(canonical) > MAX_URL_LENGTH:  # percent-encoding can triple a URL's length
        raise BadURL(f"URL longer than {MAX_URL_LENGTH} characters once canonical")
    return canonical


def _drop_path_params(path: str, dropped: Collection[str]) -> str:
    # Session ids also hide in path parameters: /cart;jsessionid=1A2B
    if ";" not in path:
        return path
    segments = []
    for segment in path.split("/"):
        head, *params = segment.split(";")
        kept = [p for p in params if not _is_tracking(unquote(p.partition("=")[0]), dropped)]
        segments.append(";".join([head, *kept]))
    return "/".join(segments)


@lru_cache(maxsize=LINKS_REMEMBERED)  # the router asks it of every link of every page
def host_of(url: str) -> str:
    """Host of a canonical URL (lower case, no port)."""
    return urlsplit(url).hostname or ""


def fingerprint(url: str) -> bytes:
    """8-byte digest of a canonical URL: the dedup key (collisions negligible below 10^8 URLs)."""
    return hashlib.blake2b(url.encode("utf-8", "surrogatepass"), digest_size=8).digest()


@lru_cache(maxsize=LINKS_REMEMBERED)
def canonical_link(url: str, tracking: tuple[str, ...] = ()) -> str:
    """canonicalise() of an absolute link, remembered: a site's pages link to the same URLs again and
    again (navigation, footers), and canonicalising is the router's main cost per page."""
    return canonicalise(url, tracking=tracking)
