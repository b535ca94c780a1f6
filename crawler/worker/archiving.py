"""What the worker archives: each answer of a domain with `archive: true`, as an Exchange for the
WARC archive (crawler/archive/), written before the page's row is stored."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import httpx

from crawler.archive import Archive, Archived, Exchange
from crawler.archive.uploader import Uploader
from crawler.config import CrawlConfig, Rules
from crawler.fetch.fetcher import REDIRECTS, Fetcher, Headers, Response, Streamed, slices, streamed
from crawler.monitor.metrics import Metrics
from crawler.settings import Settings
from crawler.storage import ObjectStore, ObjectUrl, is_object_url


class UploadMetrics:
    """An uploader's news, as the worker's metrics (and so its heartbeat) count it."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def uploaded(self, name: str, nbytes: int, seconds: float) -> None:
        """A file is in object storage."""
        self._metrics.observe_upload(nbytes, seconds)

    def failed(self, name: str, error: str) -> None:
        """A file's upload failed."""
        self._metrics.observe_upload_failed(error)

    def waiting(self, files: int, nbytes: int) -> None:
        """Files waiting for their upload."""
        self._metrics.observe_uploads_waiting(files, nbytes)


@asynccontextmanager
async def archive_for(settings: Settings, config: CrawlConfig, metrics: Metrics) -> AsyncIterator[Archive]:
    """The process's archive: files in CRAWLER_ARCHIVE_DIR; or, for s3://BUCKET/PREFIX, written in
    CRAWLER_ARCHIVE_SPOOL and each uploaded once closed (those an earlier process left there first)."""
    async with AsyncExitStack() as stack:
        if not is_object_url(settings.archive_dir):
            yield await stack.enter_async_context(
                Archive(
                    settings.archive_dir, max_bytes=config.archive_max_bytes, prefix=config.archive_prefix
                )
            )
            return
        base = ObjectUrl.parse(settings.archive_dir, "CRAWLER_ARCHIVE_DIR")
        store = ObjectStore(settings.s3_endpoint_url)
        uploader = Uploader(Path(settings.archive_spool), store, base, UploadMetrics(metrics))
        await asyncio.to_thread(uploader.start)
        stack.push_async_callback(asyncio.to_thread, uploader.close)
        yield await stack.enter_async_context(
            Archive(
                settings.archive_spool,
                max_bytes=config.archive_max_bytes,
                prefix=config.archive_prefix,
                published_as=str(base.child("")),
                on_closed=uploader.closed,
            )
        )


class Archiving:
    """Writes answers to `archive`, counted under their domain (`domain_of` a URL); `sent` are the
    headers every request carries."""

    def __init__(
        self, archive: Archive, sent: Headers, metrics: Metrics, domain_of: Callable[[str], str]
    ) -> None:
        self._archive = archive
        self._sent = tuple(sent.items())
        self._metrics = metrics
        self._domain_of = domain_of

    async def response(
        self,
        response: Response,
        rules: Rules,
        headers: Headers | None = None,
        previous: Archived | None = None,
    ) -> Archived | None:
        """Archive `response` (asked with extra `headers`) if its domain archives; where it went.
        With `previous` (the page's stored answer), a 304 or the same payload is a revisit of it."""
        if not rules.archive:
            return None
        # A body not read (a redirect's, or one that is not HTML) is recorded as not read.
        unread = not response.body and (response.status_code in REDIRECTS or not response.is_html)
        if response.rendered:
            # Its body is the DOM; the document as the site sent it comes only if the service said.
            document = response.document
            return await self.write(
                response.url,
                response.status_code,
                response.headers,
                document or b"",
                headers,
                raw=document is not None,
                rendered=response.body,
                previous=previous,
            )
        return await self.write(
            response.url, response.status_code, response.headers, response.body, headers,
            truncated=unread, previous=previous,
        )  # fmt: skip

    async def write(
        self,
        url: str,
        status: int,
        answered: httpx.Headers,
        body: bytes,
        headers: Headers | None = None,
        *,
        truncated: bool = False,
        raw: bool = True,
        rendered: bytes | None = None,
        previous: Archived | None = None,
    ) -> Archived:
        """Archive one answer, whatever its domain's setting (the caller checked it)."""
        sent: Sequence[tuple[str, str]] = self._sent + tuple((headers or {}).items())
        archived = await self._archive.write(
            Exchange(
                url,
                status,
                answered.multi_items(),
                body,
                sent,
                datetime.now(UTC),
                truncated=truncated,
                raw=raw,
                rendered=rendered,
                previous=previous,
            )
        )
        self._metrics.observe_archived(self._domain_of(url), archived.revisit, archived.length)
        return archived


class ArchivingFetcher:
    """A Fetcher whose answers are archived as they come, for requests the visit does not make
    itself (robots.txt); closing it is its fetcher's owner's job."""

    def __init__(self, fetcher: Fetcher, archiving: Archiving) -> None:
        self._fetcher = fetcher
        self._archiving = archiving

    async def fetch(
        self, url: str, rules: Rules, *, html_only: bool = True, headers: Headers | None = None
    ) -> Response:
        """The fetcher's answer, archived first if its domain archives."""
        response = await self._fetcher.fetch(url, rules, html_only=html_only, headers=headers)
        await self._archiving.response(response, rules, headers)
        return response

    @asynccontextmanager
    async def stream(
        self, url: str, rules: Rules, *, headers: Headers | None = None
    ) -> AsyncIterator[Streamed]:
        """The fetcher's answer as it comes (robots.txt's first 500 KiB); a domain that archives gets
        it whole, archived first."""
        if not rules.archive:
            async with streamed(self._fetcher, url, rules, headers=headers) as answer:
                yield answer
            return
        response = await self.fetch(url, rules, html_only=False, headers=headers)
        yield Streamed(response.url, response.status_code, response.headers, slices(response.body))

    async def aclose(self) -> None:
        """Nothing: the fetcher it wraps is closed by its owner."""
