"""Reading the sink: reads over the process's database that fail as one SinkError naming it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Executable

from crawler.sink.database import Database


class Reader:
    """A blocking reader of the sink's tables (callers run it in a thread)."""

    def __init__(self, database: Database) -> None:
        self._db = database
        self._engine = database.engine

    def _rows(self, stmt: Executable, what: str) -> Sequence[Any]:
        with (
            self._db.errors(f"reading {what} from {self._db.redacted} failed"),
            self._engine.connect() as conn,
        ):
            return conn.execute(stmt).all()
