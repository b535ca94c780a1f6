"""The crawl message on the wire: a versioned JSON body, so old and new workers can share a queue."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aio_pika import DeliveryMode, Message

from crawler.archive import Archived
from crawler.errors import InvalidMessage

# The body's "v". A field added later is optional and ignored by older workers (no new version);
# a change they could not read bumps it, and workers read every version they know. A message of a
# version this worker does not know is set aside (reason "invalid"), not lost.
VERSION = 1
READABLE_VERSIONS = frozenset({1})
MAX_MESSAGE_BYTES = 64 * 1024
MAX_DEPTH = 1_000_000
MAX_VIA = 64  # redirect hops a message may carry; max_redirects stops at 50
# A crawl id: it becomes part of Redis keys, so only characters that need no quoting there.
CRAWL_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_SITEMAP_DEPTH = 16  # the wire's bound; how deep indexes are read is crawler.parse.sitemaps' MAX_DEPTH
MAX_VALIDATOR = 512  # an ETag, Last-Modified or signature a refresh may carry (the row's column size)


@dataclass(frozen=True, slots=True)
class Refresh:
    """What a refresh of a stored page carries from its row: the validators to send, the signature
    to compare, its interval so far, its gone answers in a row and its newest version."""

    etag: str | None = None
    last_modified: str | None = None
    signature: str | None = None
    interval: float | None = None
    gone: int = 0
    version: int | None = None
    archived: Archived | None = None  # its stored answer in the WARC archive, for a revisit record

    def unchanged(self, signature: str | None) -> bool:
        """Whether an answer signed `signature` is the stored content, still there (not gone)."""
        return signature is not None and signature == self.signature and self.gone == 0

    def encode(self) -> dict[str, Any]:
        """The refresh as the message's "refresh" object (absent values left out)."""
        out: dict[str, Any] = {"gone": self.gone}
        for key in ("etag", "last_modified", "signature", "interval", "version"):
            if (value := getattr(self, key)) is not None:
                out[key] = value
        if self.archived is not None:
            a = self.archived
            out["archived"] = [a.file, a.offset, a.length, a.digest, a.date]
        return out

    @classmethod
    def decode(cls, data: Any) -> Refresh:
        """A refresh from a message's "refresh" object; InvalidMessage saying what is wrong."""
        if not isinstance(data, dict):
            raise InvalidMessage("'refresh' is not a JSON object")
        texts = {key: data.get(key) for key in ("etag", "last_modified", "signature")}
        for key, value in texts.items():
            if value is not None and (not isinstance(value, str) or len(value) > MAX_VALIDATOR):
                raise InvalidMessage(f"'refresh.{key}' is not a string of at most {MAX_VALIDATOR} characters")
        interval, gone = data.get("interval"), data.get("gone", 0)
        if interval is not None and (
            isinstance(interval, bool) or not isinstance(interval, int | float) or not 0 < interval < 1e9
        ):
            raise InvalidMessage("'refresh.interval' is not a positive number of seconds")
        if isinstance(gone, bool) or not isinstance(gone, int) or not 0 <= gone <= 1_000:
            raise InvalidMessage("'refresh.gone' is not an integer from 0 to 1000")
        version = data.get("version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int) or version < 1):
            raise InvalidMessage("'refresh.version' is not a positive integer")
        return cls(
            texts["etag"], texts["last_modified"], texts["signature"],
            float(interval) if interval is not None else None, gone, version,
            _archived(data.get("archived")),
        )  # fmt: skip


def _archived(value: Any) -> Archived | None:
    if value is None:
        return None
    shape = (str, int, int, str, str)
    if (
        not isinstance(value, list)
        or len(value) != len(shape)
        or not all(isinstance(v, t) and not isinstance(v, bool) for v, t in zip(value, shape, strict=True))
        or any(isinstance(v, str) and len(v) > MAX_VALIDATOR for v in value)
    ):
        raise InvalidMessage("'refresh.archived' is not [file, offset, length, digest, date]")
    return Archived(*value)


@dataclass(frozen=True, slots=True)
class SitemapTask:
    """A message's URL is a sitemap to read, `depth` indexes below the one robots.txt or domains.yaml
    named; with `find`, the URL is an origin's robots.txt, whose sitemaps are to be found. `round`
    names the reading of a domain's sitemaps it belongs to: a file is read once per round.
    `counted`: the task counts in its crawl's counts (a round a crawl's seeds began)."""

    round: str
    depth: int = 0
    find: bool = False
    counted: bool = True

    @property
    def whole(self) -> bool:
        """Whether its file is read whole, however unchanged: a crawl's seeds began its round, and a new
        crawl needs every URL it lists; a recrawl's round asks conditionally, for what changed."""
        return self.counted

    def encode(self) -> dict[str, Any]:
        """The task as the message's "sitemap" object."""
        out: dict[str, Any] = {"round": self.round, "depth": self.depth}
        if self.find:
            out["find"] = True
        if not self.counted:
            out["counted"] = False
        return out

    @classmethod
    def decode(cls, data: Any) -> SitemapTask:
        """A task from a message's "sitemap" object; InvalidMessage saying what is wrong."""
        if not isinstance(data, dict):
            raise InvalidMessage("'sitemap' is not a JSON object")
        round_, depth, find = data.get("round"), data.get("depth", 0), data.get("find", False)
        counted = data.get("counted", True)
        if not isinstance(round_, str) or not CRAWL_ID.fullmatch(round_):
            raise InvalidMessage("'sitemap.round' is not an id (1-64 letters, digits, '-' or '_')")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_SITEMAP_DEPTH:
            raise InvalidMessage(f"'sitemap.depth' is not an integer from 0 to {MAX_SITEMAP_DEPTH}")
        if not isinstance(find, bool) or not isinstance(counted, bool):
            raise InvalidMessage("'sitemap.find' or 'sitemap.counted' is not true or false")
        return cls(round_, depth, find, counted)


@dataclass(frozen=True, slots=True)
class CrawlMessage:
    """One URL to crawl, at `depth` link hops from its seed.

    `via` holds the fingerprints (hex) of the redirects that led here, oldest first: the chain's
    length for max_redirects, and its members for loops. `crawl` is the id of the crawl it belongs
    to; None is the default crawl (messages queued before crawls had ids).
    """

    url: str
    depth: int = 0
    via: tuple[str, ...] = ()
    crawl: str | None = None
    refresh: Refresh | None = None  # set: a stored page fetched again on its schedule
    sitemap: SitemapTask | None = None  # set: not a page, a sitemap (or an origin's sitemaps to find)

    def encode(self) -> bytes:
        """The JSON body of this message."""
        body: dict[str, Any] = {"v": VERSION, "url": self.url, "depth": self.depth}
        if self.via:
            body["via"] = list(self.via)
        if self.crawl is not None:
            body["crawl"] = self.crawl
        if self.refresh is not None:
            body["refresh"] = self.refresh.encode()
        if self.sitemap is not None:
            body["sitemap"] = self.sitemap.encode()
        return json.dumps(body, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, body: bytes) -> CrawlMessage:
        """Parse a message body; raise InvalidMessage saying what is wrong with it."""
        if len(body) > MAX_MESSAGE_BYTES:
            raise InvalidMessage(f"message of {len(body)} bytes exceeds {MAX_MESSAGE_BYTES}")
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise InvalidMessage(f"body is not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise InvalidMessage("body is not a JSON object")
        version = data.get("v")
        if isinstance(version, bool) or not isinstance(version, int) or version not in READABLE_VERSIONS:
            readable = ", ".join(map(str, sorted(READABLE_VERSIONS)))
            raise InvalidMessage(
                f"unknown message version {str(version)[:20]!r} (this worker reads {readable})"
            )
        url, depth, via = data.get("url"), data.get("depth", 0), data.get("via", [])
        if not isinstance(url, str) or not url:
            raise InvalidMessage("'url' missing or not a string")
        if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
            raise InvalidMessage(f"'depth' is not an integer from 0 to {MAX_DEPTH}")
        if (
            not isinstance(via, list)
            or len(via) > MAX_VIA
            or not all(isinstance(hop, str) and len(hop) <= 64 for hop in via)
        ):
            raise InvalidMessage(f"'via' is not a list of at most {MAX_VIA} fingerprints")
        crawl = data.get("crawl")
        if crawl is not None and (not isinstance(crawl, str) or not CRAWL_ID.fullmatch(crawl)):
            raise InvalidMessage("'crawl' is not a crawl id (1-64 letters, digits, '-' or '_')")
        refresh = Refresh.decode(data["refresh"]) if data.get("refresh") is not None else None
        sitemap = SitemapTask.decode(data["sitemap"]) if data.get("sitemap") is not None else None
        return cls(url=url, depth=depth, via=tuple(via), crawl=crawl, refresh=refresh, sitemap=sitemap)


def persistent(body: bytes, priority: int, headers: Mapping[str, Any] | None = None) -> Message:
    """A persistent AMQP message (aio-pika's default is transient: lost on a broker restart)."""
    return Message(
        body,
        delivery_mode=DeliveryMode.PERSISTENT,
        priority=priority,
        content_type="application/json",
        headers=dict(headers or {}),
    )
