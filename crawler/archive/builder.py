"""An exchange as WARC/1.1 records (warcio builds them): response, conversion, request; or revisit.

The payload is stored as the crawler read it, its content and transfer codings undone: a replay
tool reads it as it is, and the parser reads it again without a decoder. The headers that described
those codings (and the length as sent) would now lie about the payload, so they are kept under
`X-Crawler-` names, as StormCrawler does, and Content-Length gives the payload's own length.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from crawler.archive.exchange import Archived, Exchange, payload_digest

WARC_VERSION = "1.1"
RENAMED = {
    "content-encoding": "Content-Encoding",
    "transfer-encoding": "Transfer-Encoding",
    "content-length": "Content-Length",
}
RENAMED_PREFIX = "X-Crawler-"
NOT_MODIFIED_PROFILE = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
RENDERED_TYPE = "text/html; charset=utf-8"  # a DOM is serialized as UTF-8, whatever the page was


def warc_date(exchange: Exchange) -> str:
    """The exchange's WARC-Date: its fetch time, to the microsecond (WARC/1.1 allows it)."""
    return exchange.fetched_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def build(exchange: Exchange) -> tuple[list[bytes], str, bool]:
    """The exchange's records, each uncompressed, the first the response (or revisit); and the
    payload's digest, and whether it was written as a revisit."""
    writer = WARCWriter(io.BytesIO(), gzip=False, warc_version=WARC_VERSION)
    date = warc_date(exchange)
    digest = payload_digest(exchange.body)
    previous = exchange.previous
    first = _revisit(writer, exchange, date, previous, digest) if previous is not None else None
    revisit = first is not None
    if first is None:
        first = _response(writer, exchange, date, digest)
    records = [first]
    first_id = first.rec_headers.get_header("WARC-Record-ID")
    if exchange.rendered is not None:
        records.append(_rendered(writer, exchange, date, first_id))
    records.append(_request(writer, exchange, date, first_id))
    return [_serialized(writer, record) for record in records], digest, revisit


def _response(writer: WARCWriter, exchange: Exchange, date: str, digest: str) -> Any:
    whole = exchange.raw and not exchange.truncated
    # Given, the payload's digest is not computed again by warcio.
    headers = {"WARC-Date": date, "WARC-Payload-Digest": digest if whole else payload_digest(b"")}
    if not whole:
        # A body not read (not HTML), or one a fetch service did not pass on (it sent its DOM only):
        # the record says so rather than pass for an empty page.
        headers["WARC-Truncated"] = "unspecified"
    body = exchange.body if whole else b""
    return writer.create_warc_record(
        exchange.url,
        "response",
        payload=io.BytesIO(body),
        length=len(body),
        warc_headers_dict=headers,
        http_headers=_answer(exchange, len(body) if whole else None),
    )


def _revisit(
    writer: WARCWriter, exchange: Exchange, date: str, previous: Archived, digest: str
) -> Any | None:
    """A 304, or the stored payload again: headers only, referring to the stored record."""
    if exchange.status == 304:
        profile = NOT_MODIFIED_PROFILE
    elif exchange.raw and not exchange.truncated and digest == previous.digest:
        profile = None  # warcio's own: identical-payload-digest
    else:
        return None
    record = writer.create_revisit_record(
        exchange.url,
        previous.digest,
        exchange.url,
        previous.date,
        http_headers=_answer(exchange, None if exchange.status == 304 else len(exchange.body)),
        warc_headers_dict={"WARC-Date": date},
    )
    if profile is not None:
        record.rec_headers.replace_header("WARC-Profile", profile)
    return record


def _rendered(writer: WARCWriter, exchange: Exchange, date: str, refers_to: str) -> Any:
    """The DOM a browser made of the page: a `conversion` of the response record (WARC 1.1: content
    made from another record's by a process), not a `resource`, which would stand as the page's own
    content and be replayed for it."""
    dom = exchange.rendered or b""
    headers = {"WARC-Date": date, "WARC-Refers-To": refers_to}
    return writer.create_warc_record(
        exchange.url,
        "conversion",
        payload=io.BytesIO(dom),
        length=len(dom),
        warc_content_type=RENDERED_TYPE,
        warc_headers_dict=headers,
    )


def _request(writer: WARCWriter, exchange: Exchange, date: str, concurrent_to: str) -> Any:
    split = urlsplit(exchange.url)
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    headers = [("Host", split.netloc), *exchange.request_headers]
    return writer.create_warc_record(
        exchange.url,
        "request",
        payload=io.BytesIO(b""),
        length=0,
        warc_headers_dict={"WARC-Date": date, "WARC-Concurrent-To": concurrent_to},
        http_headers=StatusAndHeaders(f"GET {target} HTTP/1.1", headers, is_http_request=True),
    )


def _answer(exchange: Exchange, length: int | None) -> StatusAndHeaders:
    headers = _renamed(exchange.headers)
    if length is not None:
        headers.append(("Content-Length", str(length)))
    try:
        reason = HTTPStatus(exchange.status).phrase
    except ValueError:
        reason = ""
    return StatusAndHeaders(f"{exchange.status} {reason}".strip(), headers, protocol="HTTP/1.1")


def _renamed(headers: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    out = []
    for name, value in headers:
        canonical = RENAMED.get(name.lower())
        name = RENAMED_PREFIX + canonical if canonical is not None else _writable(name)
        out.append((name, _writable(value)))
    return out


def _writable(text: str) -> str:
    """A header as a record can hold it: a byte the site sent that is no UTF-8 (kept by the HTTP
    client as a lone surrogate) becomes U+FFFD, a line break a space."""
    if text.isascii() and "\r" not in text and "\n" not in text:
        return text
    cleaned = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return cleaned.replace("\r", " ").replace("\n", " ")


def _serialized(writer: WARCWriter, record: Any) -> bytes:
    out = io.BytesIO()
    writer.out = out  # the writer's public attribute: where its records go
    writer.write_record(record)
    return out.getvalue()
