"""One /fetch request's parameters, validated: the target, the exit wanted, the limits and the form
of the answer (the target's own, raw, unless `json_response=true` asks for the envelope)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from crawler.fetch.api import ENVELOPE_MOST_BODY, STREAM_MOST_BODY
from crawler.gateway.render import RenderAsk, render_options

DEFAULT_TIMEOUT = 10.0
MOST_TIMEOUT = 120.0
DEFAULT_BODY = 5_000_000
MOST_BODY = STREAM_MOST_BODY  # a raw answer's: passed on as it comes, never held whole
MOST_WHOLE_BODY = ENVELOPE_MOST_BODY  # an envelope's or a render's: held whole while answered


@dataclass(frozen=True, slots=True)
class Ask:
    """One request, validated."""

    url: str
    host: str
    render: RenderAsk | None  # render_js=true: how to render it
    premium: bool
    country: str | None
    session: str | None
    html_only: bool  # a body that is not HTML is not read
    follow: bool  # redirects are followed by the gateway
    envelope: bool  # the answer is the JSON envelope, not the target's own
    timeout: float
    max_body_bytes: int
    # return_document=true: a rendered page's envelope also carries the document as the site sent it
    # (for a WARC archive's response record, beside the DOM).
    document: bool = False


def flag(query: Mapping[str, str], name: str, default: bool) -> bool:
    """A true/false parameter; ValueError naming it if it is neither."""
    value = query.get(name)
    if value is None:
        return default
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"{name}={value!r}: use true or false")


def parse_ask(query: Mapping[str, str]) -> Ask:
    """The request from its query; ValueError saying what is wrong.

    The envelope keeps its defaults (redirects and non-HTML bodies returned unread); the raw form
    takes the paid APIs' (redirects followed, every body passed on).
    """
    url = query.get("url", "")
    if any(c <= " " or c == "\x7f" for c in url):
        # It would reach the request line as it is: a space splits it, CR/LF end it early.
        raise ValueError("url: a space or control character in it; percent-encode it (%20)")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("url: an absolute http(s) URL is required")
    envelope = flag(query, "json_response", False)
    render = flag(query, "render_js", False)
    country = query.get("country_code") or None
    if country is not None and not (len(country) == 2 and country.isalpha()):
        raise ValueError(f"country_code={country!r}: a two-letter country code")
    session = query.get("session") or None
    if session is not None and not (len(session) <= 64 and all(c.isalnum() or c in "_.-" for c in session)):
        raise ValueError("session: up to 64 letters, digits, '_', '.' or '-'")
    try:
        timeout = float(query.get("timeout", DEFAULT_TIMEOUT))
        body = int(query.get("max_body_bytes", DEFAULT_BODY))
    except ValueError:
        raise ValueError("timeout and max_body_bytes are numbers") from None
    most = MOST_WHOLE_BODY if envelope or render else MOST_BODY
    if not 0 < timeout <= MOST_TIMEOUT or not 1024 <= body <= most:
        raise ValueError(
            f"timeout in (0, {MOST_TIMEOUT:g}] s, max_body_bytes in [1024, {most}]"
            + (" (json_response and render_js answers are held whole)" if most < MOST_BODY else "")
        )
    return Ask(
        url,
        parts.hostname.lower(),
        render_options(query) if render else None,
        flag(query, "premium_proxy", False),
        country.upper() if country else None,
        session,
        flag(query, "html_only", envelope),
        flag(query, "follow_redirects", not envelope),
        envelope,
        timeout,
        body,
        flag(query, "return_document", False),
    )
