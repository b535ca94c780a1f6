"""Group commit: concurrent page writes share one transaction; each returns once its row is stored."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from crawler.sink.sql import PageRecord, Sink
from crawler.sink.versions import Version

MAX_BATCH = 256


@dataclass(slots=True)
class _Waiting:
    record: PageRecord
    done: asyncio.Future[Version | None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class GroupCommit:
    """Writes to a sink in batches: what arrives while a batch commits goes in the next one.

    A writer still waits for its own row's commit, so a message is acked only after its page is stored.
    """

    def __init__(self, sink: Sink, max_batch: int = MAX_BATCH) -> None:
        self._sink = sink
        self._max_batch = max_batch
        self._queue: list[_Waiting] = []
        self._flusher: asyncio.Task[None] | None = None

    async def store(self, record: PageRecord) -> Version | None:
        """Store one page; the version it made, if any. Raise the sink's error if its batch (and its
        own retry) failed."""
        waiting = _Waiting(record)
        self._queue.append(waiting)
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        return await asyncio.shield(waiting.done)

    async def versions_after(self, url: str, number: int) -> list[Version]:
        """The versions of the page at `url` newer than `number`, oldest first (to announce again)."""
        return await self._sink.versions_after(url, number)

    async def _flush(self) -> None:
        try:
            while self._queue:
                await asyncio.sleep(0)  # let writers woken in the same loop turn join this batch
                batch, self._queue = self._queue[: self._max_batch], self._queue[self._max_batch :]
                await self._commit(batch)
        finally:
            self._flusher = None

    async def _commit(self, batch: list[_Waiting]) -> None:
        try:
            made = await self._sink.store_many([w.record for w in batch])
        except Exception as exc:
            if len(batch) == 1:
                _settle(batch[0], exc)
                return
            # One bad row must not fail its neighbours: store them one by one to find it.
            for waiting in batch:
                try:
                    alone = await self._sink.store_many([waiting.record])
                except Exception as single:
                    _settle(waiting, single)
                else:
                    _settle(waiting, alone.get(waiting.record.url))
        else:
            # Of two writers of one url in a batch, the last one's row (and version) was stored.
            last = {w.record.url: w.record for w in batch}
            for waiting in batch:
                url = waiting.record.url
                _settle(waiting, made.get(url) if last[url] is waiting.record else None)


def _settle(waiting: _Waiting, result: Version | BaseException | None) -> None:
    if waiting.done.done():
        return
    if isinstance(result, BaseException):
        waiting.done.set_exception(result)
    else:
        waiting.done.set_result(result)
