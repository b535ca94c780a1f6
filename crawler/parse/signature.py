"""A page's content signature: what a reader of the page sees, so that nothing else counts as a change.

It covers, in this order: the title; the text of the body outside `script`, `style`, `template` and
`noscript` elements and comments, without its whitespace (so a change of layout alone is none); and
the fields extracted from the page (as JSON, keys sorted). It leaves out the head but its title (a
CSRF token in a `meta`, a nonce in a `script` or a `link`), comments, every attribute (nonces, ids,
classes, link targets, image sources) and the markup itself. A body that is not HTML is not read: its
signature is its Content-Type, Content-Length, ETag and Last-Modified. A redirect's is its target.
BLAKE2b, 16 bytes, in hex.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from lxml import etree

_UNSEEN = ("script", "style", "template", "noscript", etree.Comment)
_WHITESPACE = b" \t\n\r\f\v"


def signature(root: etree._Element | None, title: str | None, data: dict[str, Any] | None) -> str:
    """The signature of a parsed page: its title, its visible text and its extracted fields.

    It takes the unseen elements out of `root` (cheaper than reading around them): sign a page last.
    """
    digest = hashlib.blake2b(digest_size=16)
    digest.update((title or "").encode())
    digest.update(b"\0")
    body = root.find("body") if root is not None else None
    if body is not None:
        etree.strip_elements(body, *_UNSEEN, with_tail=False)
        digest.update(etree.tostring(body, method="text", encoding="utf-8").translate(None, _WHITESPACE))
    digest.update(b"\0")
    digest.update(json.dumps(data or {}, sort_keys=True, default=str, separators=(",", ":")).encode())
    return digest.hexdigest()


def signature_of(*parts: str | None) -> str:
    """The signature of what stands for a content that is not parsed: headers, a redirect's target."""
    return hashlib.blake2b("\0".join(p or "" for p in parts).encode(), digest_size=16).hexdigest()
