"""A run of `crawler reparse`: archived pages in id order, a batch at a time read again by a pool of
processes, then their links routed and their rows, versions and the run's cursor committed together.
Stopped, it has lost nothing: the same command resumes after the last batch committed."""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing
import time
from collections import defaultdict, deque
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from itertools import chain
from pathlib import Path

from crawler.archive.source import ArchiveSource
from crawler.changes.feed import ChangeFeed
from crawler.config import CrawlConfig
from crawler.dedup.near import NearIndexes
from crawler.errors import FeedError
from crawler.quality.checks import Expectations, Verdict
from crawler.reparse.extraction import Result, reread, start
from crawler.reparse.linking import Links
from crawler.sink.reparsed import ReparseStore, Reread, Run, Selection, Target
from crawler.sink.versions import Version

log = logging.getLogger(__name__)
BATCH = 500  # pages per commit: what a stop finishes, and a kill may have to do again
CHUNK = 100  # most pages in one task of a pool process (fewer: every process gets a share)
AHEAD = 2  # batches in the pool at once: the next one is read while the parent writes one
FEED_TRIES = 3  # publishes of a batch's versions before the run stops for it
FEED_WAIT = 0.5  # seconds before the second try (twice that before the third)

Reading = asyncio.Future[list[list[Result]]]
"""A batch being read by the pool: its chunks' results."""


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a run stands: pages done of those it began with, and what they came to."""

    done: int
    total: int
    changed: int
    failed: int
    skipped: int
    links: int
    seconds: float
    resumed: bool
    rate: float  # pages per second read by this process (a resumed run's earlier pages left out)


class Reparser:
    """Runs `crawler reparse` over `selection`, with `workers` processes; `links` None: no links routed;
    `near` None: no simhash claimed (a page's `near_duplicate_of` stays as it was)."""

    def __init__(
        self,
        config: CrawlConfig,
        store: ReparseStore,
        archive: ArchiveSource | str,
        selection: Selection,
        *,
        workers: int,
        links: Links | None,
        near: NearIndexes | None = None,
        feed: ChangeFeed | None = None,
        batch: int = BATCH,
    ) -> None:
        self._near = near
        self._config = config
        self._store = store
        # A directory's name: the local archive there.
        self._archive = archive if isinstance(archive, ArchiveSource) else ArchiveSource(Path(archive))
        self._selection = selection
        self._workers = workers
        self._links = links
        self._feed = feed  # None: versions made are stored, not published
        self._batch = batch
        self._chunk = max(1, min(CHUNK, math.ceil(batch / workers)))
        self._skipped = 0
        self._before = 0  # pages an earlier process of the run had done
        self._warned: set[str] = set()  # files whose unreadable records were said
        self._unconfigured: set[str] = set()  # domains met that domains.yaml no longer has
        self._expectations: dict[str, Expectations] = {}  # per domain, compiled once

    async def run(self, stop: asyncio.Event, report: Callable[[Progress], None]) -> Progress:
        """Read every selected page again (until `stop` is set: the batch under way is finished and
        committed); where the run stands at the end."""
        run = await asyncio.to_thread(self._store.begin, self._selection, datetime.now(UTC))
        total = run.pages + await asyncio.to_thread(self._store.remaining, self._selection, run.last_page_id)
        self._before = run.pages
        started = time.monotonic()
        # spawn: a forked child would inherit the parent's sockets and event loop.
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(
            self._workers, context, initializer=start, initargs=(self._config, self._archive)
        )
        ahead: deque[tuple[list[Target], Reading]] = deque()
        after, exhausted = run.last_page_id, False
        progress = self._progress(run, total, started)
        try:
            while True:
                while not exhausted and not stop.is_set() and len(ahead) < AHEAD:
                    targets = await asyncio.to_thread(
                        self._store.targets, self._selection, after, self._batch
                    )
                    if targets:
                        after = targets[-1].id
                        ahead.append((targets, self._read(pool, targets)))
                    exhausted = len(targets) < self._batch
                if not ahead:
                    break
                targets, reading = ahead.popleft()
                await self._commit(run, targets, list(chain.from_iterable(await reading)))
                progress = self._progress(run, total, started)
                report(progress)
                if stop.is_set():
                    break
            if exhausted and not ahead:
                await asyncio.to_thread(self._store.finish, run, datetime.now(UTC))
        finally:
            for _, reading in ahead:  # read ahead, never to be committed: the next run reads them
                reading.cancel()
                if reading.done() and not reading.cancelled():
                    reading.exception()  # retrieved: a failure of a batch dropped is no news
            pool.shutdown(wait=True, cancel_futures=True)
        return progress

    def _read(self, pool: ProcessPoolExecutor, targets: Sequence[Target]) -> Reading:
        """The batch handed to the pool, each process a share of it in file and offset order."""
        loop = asyncio.get_running_loop()
        ordered = sorted(targets, key=lambda t: (t.archived.file, t.archived.offset))
        size = self._chunk
        links = self._links is not None
        chunks = [ordered[i : i + size] for i in range(0, len(ordered), size)]
        return asyncio.gather(*(loop.run_in_executor(pool, reread, chunk, links) for chunk in chunks))

    async def _commit(self, run: Run, targets: Sequence[Target], results: Sequence[Result]) -> None:
        """Route the batch's links, then store its changed rows and the run's cursor together."""
        missing = [r for r in results if r.outcome == "missing"]
        self._warn(results)
        self._skipped += sum(1 for r in results if r.outcome in ("skipped", "unconfigured"))
        links = await self._route(results, run)
        results = [await self._claimed(r) for r in results]
        quality: dict[str, dict[tuple[str, str], int]] = defaultdict(dict)
        changed = [reread_ for r in results if (reread_ := self._changed(r, quality)) is not None]
        written = await asyncio.to_thread(
            self._store.commit,
            run,
            changed,
            cursor=targets[-1].id,
            pages=len(targets),
            failed=len(missing),
            links=links,
            quality=quality,
        )
        if written and self._feed is not None:
            await self._announce(written)

    async def _announce(self, versions: Sequence[Version]) -> None:
        """The batch's new versions to the change feed, confirmed, as a worker publishes its own; a
        broker that does not confirm them after a few tries stops the run (FeedError)."""
        assert self._feed is not None
        for attempt in range(1, FEED_TRIES + 1):
            try:
                return await self._feed.announce_all(versions)
            except FeedError as exc:
                if attempt == FEED_TRIES:
                    raise FeedError(
                        f"reparse: {exc}; the change feed missed {len(versions)} versions"
                    ) from exc
                log.warning("reparse: %s; publishing the batch's versions again", exc)
                await asyncio.sleep(FEED_WAIT * attempt)

    def _warn(self, results: Sequence[Result]) -> None:
        """One line per file with unreadable records, and per domain no longer configured, the first
        time each is met."""
        unreadable: dict[str, list[Result]] = defaultdict(list)
        for r in results:
            if r.outcome == "missing":
                unreadable[r.target.archived.file].append(r)
        for name in sorted(unreadable.keys() - self._warned):
            self._warned.add(name)
            found = unreadable[name]
            log.warning(
                "reparse: %s: %d page(s) of it unreadable (%s); they are left as they are",
                name,
                len(found),
                found[0].note,
            )
        gone = {r.target.domain for r in results if r.outcome == "unconfigured"}
        for domain in sorted(gone - self._unconfigured):
            self._unconfigured.add(domain)
            log.warning("reparse: %s is no longer in domains.yaml: its pages are left as they are", domain)

    async def _claimed(self, result: Result) -> Result:
        """`result` with its near-duplicate: its simhash claimed in the fleet's index (in page order,
        as a crawl claims them), as the crawl would; without an index, the stored one kept."""
        content, target = result.content, result.target
        if content is None:
            return result
        near = self._config.rules_for(target.domain).near_duplicates
        if self._near is None or near is None or content.simhash is None:
            kept = target.content.near_duplicate_of if self._near is None else None
            return replace(result, content=replace(content, near_duplicate_of=kept))
        match = await self._near.at(near.distance).claim(int(content.simhash, 16), target.url)
        original = match.page if match is not None else None
        return replace(result, content=replace(content, near_duplicate_of=original))

    def _checked(self, result: Result, quality: dict[str, dict[tuple[str, str], int]]) -> Verdict | None:
        """The page's new data checked against its domain's expectations, and the change to its crawl's
        quality counts: its new verdict's kinds in, its stored data's (checked as now) out."""
        read, target = result.read, result.target
        if read is None:
            return None
        expectations = self._expectations.get(target.domain)
        if expectations is None:
            rules = self._config.rules_for(target.domain)
            expectations = self._expectations[target.domain] = Expectations(rules.expect, rules.extract)
        now = expectations.check(target.url, read.data or {})
        if target.crawl is not None:
            then = expectations.check(target.url, target.data or {})
            changes = quality[target.crawl]
            for kinds, sign in ((now.kinds, 1), (then.kinds, -1)):
                for kind in kinds:
                    key = (target.domain, kind)
                    changes[key] = changes.get(key, 0) + sign
        return now

    def _changed(self, result: Result, quality: dict[str, dict[tuple[str, str], int]]) -> Reread | None:
        """The row `result` makes, if it differs from the stored one; its crawl's quality counts
        changed into `quality`."""
        verdict = self._checked(result, quality)
        failed = (verdict.listed() or None) if verdict is not None else None
        read, target, content = result.read, result.target, result.content
        history = self._config.rules_for(target.domain).history is not None
        new_content = content if content is not None and content != target.content else None
        if read is None:  # a document: its content alone, and its title
            if new_content is None and (content is None or result.title == target.title):
                return None
            title = result.title if content is not None else target.title
            return Reread(
                target,
                title,
                target.data,
                target.error,
                target.signature,
                history,
                new_content,
                target.expectations,
            )
        data = read.data or None
        signature = read.signature if target.signature is not None else None
        if (
            (read.title, data, read.error) == (target.title, target.data, target.error)
            and (signature is None or signature == target.signature)
            and new_content is None
            and failed == target.expectations
        ):
            return None
        return Reread(target, read.title, data, read.error, signature, history, new_content, failed)

    async def _route(self, results: Sequence[Result], run: Run) -> int:
        """Route the links of the pages read; those seen before are dropped by dedup. How many went."""
        if self._links is None:
            return 0
        found = [
            (r.target.depth + 1, r.target.crawl, r.read.links) for r in results if r.read and r.read.links
        ]
        # One claimant per run: a resumed run may publish again what it claimed but never confirmed.
        return await self._links.route(found, f"reparse:{run.id}".encode())

    def _progress(self, run: Run, total: int, started: float) -> Progress:
        seconds = time.monotonic() - started
        return Progress(
            run.pages,
            total,
            run.changed,
            run.failed,
            self._skipped,
            run.links,
            seconds,
            run.resumed,
            (run.pages - self._before) / max(seconds, 1e-9),
        )
