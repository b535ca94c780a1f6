"""Finished WARC files moved to object storage: each uploaded in checksummed parts, deleted from the
spool only once the store holds it whole, tried again later if it fails. A file still in the spool
when its process stops (the store was away) is uploaded by the next process that starts there."""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from crawler.archive.writer import SUFFIX
from crawler.errors import StorageError
from crawler.storage import ObjectStore, ObjectUrl

log = logging.getLogger(__name__)

# Seconds before a failed upload is tried again, the last repeated for as long as the process runs.
RETRY_DELAYS = (5.0, 30.0, 120.0, 600.0)


class UploadReport(Protocol):
    """Who hears of uploads (the worker's metrics and heartbeat)."""

    def uploaded(self, name: str, nbytes: int, seconds: float) -> None: ...

    def failed(self, name: str, error: str) -> None: ...

    def waiting(self, files: int, nbytes: int) -> None: ...


class Uploader:
    """Uploads the finished files of `spool` under `base` in a thread of its own; `start()`, hand it
    each file closed (`closed`), `close()` at the end (one last try for every file left)."""

    def __init__(
        self,
        spool: Path,
        store: ObjectStore,
        base: ObjectUrl,
        report: UploadReport | None = None,
        delays: Sequence[float] = RETRY_DELAYS,
    ) -> None:
        self.spool = spool
        self._store = store
        self._base = base
        self._report = report
        self._delays = tuple(delays)
        self._due: list[tuple[float, str, int]] = []  # (when, name, tries so far)
        self._busy: str | None = None
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="crawler-upload", daemon=True)

    def start(self) -> list[str]:
        """Begin; the finished files an earlier process left in the spool are the first uploaded
        (their names)."""
        left = sorted(p.name for p in self.spool.glob(f"*{SUFFIX}")) if self.spool.is_dir() else []
        with self._cond:
            for name in left:
                heapq.heappush(self._due, (0.0, name, 0))
        if left:
            log.info(
                "archive: %d finished file(s) left in %s by an earlier process: uploading",
                len(left),
                self.spool,
            )
        self._waiting()
        self._thread.start()
        return left

    def closed(self, path: Path) -> None:
        """A file of the spool is finished: upload it (called from the archive's writer thread)."""
        with self._cond:
            heapq.heappush(self._due, (0.0, path.name, 0))
            self._cond.notify()
        self._waiting()

    def close(self, timeout: float | None = None) -> list[str]:
        """Try every file not yet uploaded once more, then stop; the names still in the spool."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)
        with self._cond:
            return sorted(name for _, name, _ in self._due)

    def pending(self) -> list[str]:
        """The files waiting for their upload (or being uploaded)."""
        with self._cond:
            return sorted([name for _, name, _ in self._due] + ([self._busy] if self._busy else []))

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    if self._due and self._due[0][0] <= now:
                        break
                    self._cond.wait(self._due[0][0] - now if self._due else None)
                if self._stopping:
                    break
                _when, name, tries = heapq.heappop(self._due)
                self._busy = name
            self._attempt(name, tries, last=False)
        # Stopping: each file left gets one more try now; what still fails stays for the next process.
        while True:
            with self._cond:
                if not self._due or self._due[0][0] == float("inf"):
                    break
                _, name, tries = heapq.heappop(self._due)
                self._busy = name
            self._attempt(name, tries, last=True)

    def _attempt(self, name: str, tries: int, *, last: bool) -> None:
        path = self.spool / name
        started = time.monotonic()
        try:
            nbytes = self._store.upload(path, self._base.child(name))
            path.unlink(missing_ok=True)
        except FileNotFoundError:
            nbytes = -1  # another process sharing the spool took it first
        except (StorageError, OSError) as exc:
            error = str(exc)
            if last:
                log.warning("archive: %s stays in %s for the next process: %s", name, self.spool, error)
            else:
                delay = self._delays[min(tries, len(self._delays) - 1)]
                log.warning("archive: uploading %s failed (%s); trying again in %gs", name, error, delay)
            with self._cond:
                # A file given up on at the end is kept apart (infinite time): listed, not tried again.
                heapq.heappush(
                    self._due, (float("inf") if last else time.monotonic() + delay, name, tries + 1)
                )
                self._busy = None
            if self._report is not None:
                self._report.failed(name, error)
            self._waiting()
            return
        with self._cond:
            self._busy = None
        if nbytes >= 0:
            log.info("archive: %s uploaded to %s (%d bytes)", name, self._base.child(name), nbytes)
            if self._report is not None:
                self._report.uploaded(name, nbytes, time.monotonic() - started)
        self._waiting()

    def _waiting(self) -> None:
        if self._report is None:
            return
        names = self.pending()
        size = 0
        for name in names:
            with contextlib.suppress(OSError):
                size += (self.spool / name).stat().st_size
        self._report.waiting(len(names), size)
