"""Hide passwords in service URLs and in any text that may contain one."""

from __future__ import annotations

import re

# scheme://user:password@host -> scheme://user:***@host, wherever it appears in a text.
_USERINFO = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.\-]*://[^:/@\s]*:)(?P<secret>[^@\s/]*)@")


def redact(text: str) -> str:
    """`text` with the password of every URL in it replaced by ***."""
    return _USERINFO.sub(lambda m: f"{m['head']}***@", text)
