"""A run of `crawler reparse`: archived pages in id order, a batch at a time read again by a pool of
processes, then their links routed and their rows, versions and the run's cursor committed together.
Stopped, it has lost nothing: the same command resumes after the last batch committed."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain

from crawler.config import CrawlConfig
from crawler.frontier.router import Router
from crawler.reparse.extraction import Result, reread, start
from crawler.sink.reparsed import ReparseStore, Reread, Run, Selection, Target

log = logging.getLogger(__name__)
BATCH = 2_000  # pages per commit: what a stop may have to do again
CHUNK = 100  # pages per task of a pool process


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
    """Runs `crawler reparse` over `selection`, with `workers` processes; `router` None: no links."""

    def __init__(
        self,
        config: CrawlConfig,
        store: ReparseStore,
        archive_dir: str,
        selection: Selection,
        *,
        workers: int,
        router: Router | None,
        batch: int = BATCH,
    ) -> None:
        self._config = config
        self._store = store
        self._archive_dir = archive_dir
        self._selection = selection
        self._workers = workers
        self._router = router
        self._batch = batch
        self._skipped = 0
        self._before = 0  # pages an earlier process of the run had done

    async def run(self, stop: asyncio.Event, report: Callable[[Progress], None]) -> Progress:
        """Read every selected page again (until `stop` is set); where the run stands at the end."""
        run = await asyncio.to_thread(self._store.begin, self._selection, datetime.now(UTC))
        total = run.pages + await asyncio.to_thread(self._store.remaining, self._selection, run.last_page_id)
        self._before = run.pages
        started = time.monotonic()
        # spawn: a forked child would inherit the parent's sockets and event loop.
        context = multiprocessing.get_context("spawn")
        pool = ProcessPoolExecutor(
            self._workers, context, initializer=start, initargs=(self._config, self._archive_dir)
        )
        progress = self._progress(run, total, started)
        try:
            while not stop.is_set():
                targets = await asyncio.to_thread(
                    self._store.targets, self._selection, run.last_page_id, self._batch
                )
                if not targets:
                    await asyncio.to_thread(self._store.finish, run, datetime.now(UTC))
                    break
                await self._one_batch(pool, run, targets)
                progress = self._progress(run, total, started)
                report(progress)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return progress

    async def _one_batch(self, pool: ProcessPoolExecutor, run: Run, targets: Sequence[Target]) -> None:
        loop = asyncio.get_running_loop()
        # A file's records read in offset order, by one process: its pages stay in the page cache.
        ordered = sorted(targets, key=lambda t: (t.archived.file, t.archived.offset))
        chunks = [ordered[i : i + CHUNK] for i in range(0, len(ordered), CHUNK)]
        routing = self._router is not None
        done = await asyncio.gather(*(loop.run_in_executor(pool, reread, chunk, routing) for chunk in chunks))
        results = list(chain.from_iterable(done))
        missing = [r for r in results if r.outcome == "missing"]
        for note in sorted({r.note for r in missing if r.note}):
            log.warning("reparse: %s; its pages are left as they are", note)
        self._skipped += sum(1 for r in results if r.outcome == "skipped")
        links = await self._route(results, run)
        changed = [reread_ for r in results if (reread_ := self._changed(r)) is not None]
        await asyncio.to_thread(
            self._store.commit,
            run,
            changed,
            cursor=max(t.id for t in targets),
            pages=len(targets),
            failed=len(missing),
            links=links,
        )

    def _changed(self, result: Result) -> Reread | None:
        """The row `result` makes, if it differs from the stored one."""
        read, target = result.read, result.target
        if read is None:
            return None
        data = read.data or None
        signature = read.signature if target.signature is not None else None
        if (read.title, data, read.error) == (target.title, target.data, target.error) and (
            signature is None or signature == target.signature
        ):
            return None
        history = self._config.rules_for(target.domain).history is not None
        return Reread(target, read.title, data, read.error, signature, history)

    async def _route(self, results: Sequence[Result], run: Run) -> int:
        """Route the links of the pages read; those seen before are dropped by dedup. How many went."""
        if self._router is None:
            return 0
        groups: dict[tuple[int, str | None], list[str]] = defaultdict(list)
        for r in results:
            if r.read is not None and r.read.links:
                groups[r.target.depth + 1, r.target.crawl].extend(r.read.links)
        routed = 0
        for (depth, crawl), urls in groups.items():
            # One claimant per run: a resumed run may publish again what it claimed but never confirmed.
            done = await self._router.route(
                urls, depth=depth, claimant=f"reparse:{run.id}".encode(), crawl=crawl
            )
            routed += sum(done.by_domain.values())
        return routed

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
