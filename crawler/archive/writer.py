"""Writing the archive: one file at a time per process, rotated by size, each exchange's records
written, flushed and synced before its write returns (so a page is acked only once they are on disk).

Each record is its own gzip member (what WARC readers index by offset). Writes that arrive while
one batch is synced go in the next batch: one fsync serves them all, as a group commit does.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import re
import socket
import zlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import IO

from warcio.warcwriter import WARCWriter

import crawler
from crawler.archive.builder import WARC_VERSION, build, warc_date
from crawler.archive.exchange import Archived, Exchange
from crawler.errors import ArchiveError

# zlib's fastest: a quarter of the CPU of its default (6) on a 30 KB page, for ~16 % more bytes;
# warcio's own writer uses 9. Any level reads the same.
GZIP_LEVEL = 1
SUFFIX = ".warc.gz"
# A file being written is named with this after its name, as Heritrix does, and loses it once
# closed: what a copy to object storage must leave alone (a killed process's file keeps it).
OPEN = ".open"


def gzip_member(data: bytes, level: int = GZIP_LEVEL) -> bytes:
    """`data` as one gzip member."""
    compressor = zlib.compressobj(level, zlib.DEFLATED, zlib.MAX_WBITS + 16)
    return compressor.compress(data) + compressor.flush()


def file_name(prefix: str, serial: int, when: datetime | None = None, host: str | None = None) -> str:
    """`{prefix}-{UTC timestamp}-{serial}-{host}-{pid}.warc.gz`: unique across a fleet's processes
    writing to one shared directory, and in time order within each."""
    when = when or datetime.now(UTC)
    stamp = when.strftime("%Y%m%d%H%M%S") + f"{when.microsecond // 1000:03d}"
    host = re.sub(r"[^A-Za-z0-9.]+", "_", host or socket.gethostname()) or "host"
    return f"{prefix}-{stamp}-{serial:05d}-{host}-{os.getpid()}{SUFFIX}"


Packed = tuple[bytes, str, str, bool]
"""An exchange's records gzipped, its payload's digest and date, and whether it is a revisit."""


def pack(exchange: Exchange) -> Packed:
    """`exchange` as the bytes its file gets."""
    records, digest, revisit = build(exchange)
    data = b"".join(gzip_member(record) for record in records)
    return data, digest, warc_date(exchange), revisit


class _Files:
    """The current file and its rotation; used from the archive's one writer thread only."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        prefix: str,
        info: Mapping[str, str],
        published_as: str = "",
        on_closed: Callable[[Path], None] | None = None,
    ) -> None:
        self._directory = directory
        self._published_as = published_as
        self._on_closed = on_closed
        self._max_bytes = max_bytes
        self._prefix = prefix
        self._info = info
        self._serial = 0
        self._file: IO[bytes] | None = None
        self._name = ""
        self._size = 0
        self._opening = 0  # the current file's size with its warcinfo only

    def write(self, packed: list[Packed]) -> list[Archived]:
        out = []
        try:
            for data, digest, date, revisit in packed:
                file = self._room(len(data))
                offset = self._size
                file.write(data)
                self._size += len(data)
                out.append(
                    Archived(self._published_as + self._name, offset, len(data), digest, date, revisit)
                )
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
        except OSError:
            # What reached the file is unknown (a record may be cut): the next write begins a new
            # one, and this one keeps its `.open` name, as a killed process's does.
            self._abandon()
            raise
        return out

    def _abandon(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def _room(self, size: int) -> IO[bytes]:
        if self._file is not None and self._size > self._opening and self._size + size > self._max_bytes:
            self.close()
        if self._file is None:
            self._open()
        assert self._file is not None
        return self._file

    def _open(self) -> None:
        self._serial += 1
        self._directory.mkdir(parents=True, exist_ok=True)
        name = file_name(self._prefix, self._serial)
        # "x": a name is never reused, so no process appends to another's (or a cut) file.
        self._file = open(self._directory / (name + OPEN), "xb")  # noqa: SIM115 - closed by close()
        self._name = name
        self._size = 0
        self._file.write(gzip_member(_warcinfo(name, self._info)))
        self._size = self._opening = self._file.tell()

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
            os.replace(self._directory / (self._name + OPEN), self._directory / self._name)
            if self._on_closed is not None:
                self._on_closed(self._directory / self._name)


def _warcinfo(name: str, info: Mapping[str, str]) -> bytes:
    out = io.BytesIO()
    writer = WARCWriter(out, gzip=False, warc_version=WARC_VERSION)
    fields = {"software": f"crawler/{crawler.__version__}", "format": "WARC File Format 1.1", **info}
    writer.write_record(writer.create_warcinfo_record(name, fields))
    return out.getvalue()


class Archive:
    """The archive directory as one process writes it; `async with` it, then `await write(...)`.

    With `published_as` (an object storage prefix, `s3://bucket/prefix/`) rows name a file by where
    it will be once uploaded, and each file closed is handed to `on_closed` (the uploader).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        max_bytes: int,
        prefix: str,
        info: Mapping[str, str] | None = None,
        published_as: str = "",
        on_closed: Callable[[Path], None] | None = None,
    ) -> None:
        self.directory = Path(directory)
        self._files = _Files(self.directory, max_bytes, prefix, dict(info or {}), published_as, on_closed)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="crawler-archive")
        self._pending: list[tuple[Packed, asyncio.Future[Archived]]] = []
        self._writing: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Archive:
        return self

    def check(self) -> None:
        """ArchiveError, saying what to do, if the directory cannot be made or written to."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ArchiveError(
                f"cannot make the archive directory {self.directory}: {exc.strerror or exc}; "
                "set CRAWLER_ARCHIVE_DIR (CRAWLER_ARCHIVE_SPOOL for an archive in object storage) "
                "to a writable directory"
            ) from None
        if not os.access(self.directory, os.W_OK | os.X_OK):
            raise ArchiveError(
                f"the archive directory {self.directory} is not writable by this user; "
                "set CRAWLER_ARCHIVE_DIR (CRAWLER_ARCHIVE_SPOOL for an archive in object storage) "
                "to a writable directory"
            )

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def write(self, exchange: Exchange) -> Archived:
        """Write `exchange`'s records; return once they are on disk. ArchiveError if they cannot be."""
        done: asyncio.Future[Archived] = asyncio.get_running_loop().create_future()
        # Made on the caller's thread, as the page's parse is: the writer's thread only writes and
        # syncs, so the GIL does not change hands for each record.
        self._pending.append((pack(exchange), done))
        if self._writing is None or self._writing.done():
            self._writing = asyncio.create_task(self._write_pending())
        return await asyncio.shield(done)

    async def _write_pending(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                written = await loop.run_in_executor(self._thread, self._files.write, [e for e, _ in batch])
            except (OSError, ValueError) as exc:
                error = ArchiveError(f"cannot write to the archive directory {self.directory}: {exc}")
                for _, done in batch:
                    if not done.done():
                        done.set_exception(error)
                continue
            for (_, done), archived in zip(batch, written, strict=True):
                if not done.done():
                    done.set_result(archived)

    async def aclose(self) -> None:
        """Finish what is being written and close the file."""
        if self._writing is not None:
            await asyncio.gather(self._writing, return_exceptions=True)
        await asyncio.get_running_loop().run_in_executor(self._thread, self._files.close)
        self._thread.shutdown(wait=True)
