"""One request for a sitemap file: conditional on its last reading, its body spooled (to disk past a
MiB, so memory stays flat) and signed as it streams in, within sitemaps.org's 50 MiB."""

from __future__ import annotations

import hashlib
import time
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import IO

from crawler.config import Rules
from crawler.errors import FetchError, TooLarge
from crawler.fetch.fetcher import Fetcher, conditional_headers, streamed
from crawler.frontier.retry import Failure, from_status
from crawler.monitor.metrics import Metrics
from crawler.parse.sitemaps import MAX_BYTES
from crawler.sink.sitemaps import Validators
from crawler.worker.archiving import Archiving

SPOOL = 1024 * 1024  # bytes of a file held in memory before it spools to disk
READ = 64 * 1024
TIMEOUT = 60.0  # seconds a sitemap's fetch may take at least (50 MiB is no page)
NO_VALIDATORS = Validators()


@dataclass(frozen=True, slots=True)
class Fetched:
    """What a sitemap's request got: its status, and its validators and signature (its body is in
    the spool, cut at MAX_BYTES if `cut`), its redirect, or its failure."""

    status: int
    validators: Validators = NO_VALIDATORS
    cut: bool = False
    location: str | None = None
    failure: Failure | None = None


def rules_for_sitemaps(rules: Rules) -> Rules:
    """A domain's rules for its sitemap files: their own body cap and a longer deadline."""
    return rules.model_copy(
        update={"max_body_bytes": MAX_BYTES + READ, "timeout": max(rules.timeout, TIMEOUT)}
    )


async def fetch_file(
    fetcher: Fetcher,
    metrics: Metrics,
    domain: str,
    url: str,
    rules: Rules,
    stored: Validators | None,
    spool: IO[bytes],
    archiving: Archiving | None = None,
) -> Fetched:
    """One request for the sitemap at `url`, its body (if any) into `spool`; counted as every fetch is.
    With `archiving`, the answer is archived (if its domain archives) before this returns."""
    started = time.monotonic()
    status: int | None = None
    error: FetchError | None = None
    asked = _conditional(stored)
    archive = archiving if archiving is not None and rules.archive else None
    try:
        async with streamed(fetcher, url, rules, headers=asked) as answer:
            status = answer.status_code
            etag, modified = answer.headers.get("etag"), answer.headers.get("last-modified")
            failure = from_status(status, answer.headers.get("retry-after"))
            if answer.location is not None or status == 304 or failure is not None:
                if archive is not None:  # its body is not read
                    await archive.write(url, status, answer.headers, b"", asked, truncated=status != 304)
                return Fetched(status, location=answer.location, failure=failure)
            signature, cut = await _spool(answer.pieces, spool)
            if archive is not None:
                # Held whole once while its record is written: at most MAX_BYTES.
                spool.seek(0)
                await archive.write(url, status, answer.headers, spool.read(), asked, truncated=cut)
            return Fetched(status, validators=Validators(etag, modified, signature), cut=cut)
    except FetchError as exc:
        error = exc
        raise
    finally:
        status = error.status_code if error is not None else status
        metrics.observe_fetch(domain, time.monotonic() - started, status, spool.tell(), error)


def chunks(spool: IO[bytes]) -> Iterator[bytes]:
    """A spooled body's pieces, from where the spool stands."""
    return iter(lambda: spool.read(READ), b"")


def _conditional(stored: Validators | None) -> dict[str, str] | None:
    """The conditional request of a file read before: its stored validators; None if it has none."""
    return None if stored is None else conditional_headers(stored.etag, stored.last_modified)


async def _spool(pieces: AsyncGenerator[bytes, None], spool: IO[bytes]) -> tuple[str, bool]:
    """Write a body's first MAX_BYTES into `spool`; its signature, and whether there was more."""
    digest = hashlib.sha256()
    size = 0
    try:
        async with aclosing(pieces):
            async for piece in pieces:
                piece = piece[: MAX_BYTES - size]
                digest.update(piece)
                spool.write(piece)
                size += len(piece)
                if size >= MAX_BYTES:
                    return digest.hexdigest(), True
    except TooLarge:
        return digest.hexdigest(), True
    return digest.hexdigest(), False
