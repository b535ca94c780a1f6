"""Reading the sink: an engine of one's own, and reads that fail as one SinkError naming the database."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Executable
from sqlalchemy.exc import DBAPIError

from crawler.errors import SinkError
from crawler.sink.sql import create_sink_engine, engine_url, first_line


class Reader:
    """A blocking reader of the sink's tables (callers run it in a thread)."""

    def __init__(self, database_url: str) -> None:
        self._url = engine_url(database_url)
        self._redacted = self._url.render_as_string(hide_password=True)
        self._engine = create_sink_engine(self._url)

    def _rows(self, stmt: Executable, what: str) -> Sequence[Any]:
        try:
            with self._engine.connect() as conn:
                return conn.execute(stmt).all()
        except DBAPIError as exc:
            raise SinkError(f"reading {what} from {self._redacted} failed: {first_line(exc)}") from exc

    def close(self) -> None:
        """Close pooled connections."""
        self._engine.dispose()
