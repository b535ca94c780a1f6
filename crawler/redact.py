"""Hide passwords, API keys and tokens in service URLs and in any text that may contain one."""

from __future__ import annotations

import logging
import re

# scheme://user:password@host -> scheme://user:***@host, wherever it appears in a text. The password
# runs to the last "@" before the path, so an unescaped "@" inside it is hidden too.
_USERINFO = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^\s/]*)@")
# password=... as a URL query parameter (libpq, redis-py) or in a libpq key=value string; the same
# for a paid API's key or a token in a query string (ScrapingBee's api_key=, access_token=, ...).
_PARAM = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|api[_-]?key|access[_-]?key|secret|token|access_token)"
    r"\s*=\s*)(?P<secret>'[^']*'|[^\s&;,'\"]+)",
    re.I,
)
# A credential in a header as text quotes it: X-API-Key, Authorization, Proxy-Authorization.
_HEADER = re.compile(
    r"(?P<head>\b(?:x-api-key|(?:proxy-)?authorization)[\"']?\s*[:=]\s*[\"']?(?:(?:basic|bearer)\s+)?)"
    r"(?P<secret>[^\s\"',;}]+)",
    re.I,
)


def redact(text: str) -> str:
    """`text` with the password of every URL, every password=, api_key= or token= setting and every
    credential header in it replaced by ***."""
    text = _USERINFO.sub(lambda m: f"{m['head']}***@", text)
    text = _HEADER.sub(lambda m: f"{m['head']}***", text)
    return _PARAM.sub(lambda m: f"{m['head']}***", text)


class RedactingFormatter(logging.Formatter):
    """A log formatter whose every line (message, arguments, traceback) is redacted."""

    def format(self, record: logging.LogRecord) -> str:
        """The formatted record, passwords hidden."""
        return redact(super().format(record))
