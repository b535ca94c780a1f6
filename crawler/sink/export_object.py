"""`crawler export --to s3://BUCKET/KEY`: the export streamed into one multipart upload, which is
completed only once every row is in it; an export cut short (an error, Ctrl-C, SIGTERM) aborts the
upload, so nothing, not half a file, shows under the key."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from crawler.errors import ConfigError
from crawler.settings import Settings
from crawler.sink.database import Database
from crawler.sink.export import Query, export
from crawler.storage import ObjectStore, ObjectUrl


@contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a Job's end, `kill`) unwinds like Ctrl-C, so the upload is aborted, not left open."""

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: signals are its caller's
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def export_to_object(
    settings: Settings, fmt: str, to: str, query: Query | None = None, database: Database | None = None
) -> int:
    """Export the selected rows in `fmt` as the object `to`; how many were written. `database`: the
    process's (None: one for this export)."""
    url = ObjectUrl.parse(to, "--to")
    if not url.key or url.key.endswith("/"):
        raise ConfigError(f"--to {to}: name the object, e.g. s3://{url.bucket}/exports/pages.{fmt}")
    with _terminate_as_interrupt(), ObjectStore(settings.s3_endpoint_url).writer(url) as sink:
        return export(database or settings.database_url, fmt, sink, query or Query())
