"""The fleet's status as the service's views read it: one read serves every caller within a second."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from crawler.config import CrawlConfig
from crawler.frontier.client import Frontier
from crawler.monitor.status import status
from crawler.settings import Settings
from crawler.sink.database import Database

STATUS_FRESH = 1.0  # seconds a read of the fleet's status serves every caller


class StatusReads:
    """The fleet's status, read at most once per STATUS_FRESH seconds: every console open on the API
    polls it, and each read asks the management API, the database and Redis."""

    def __init__(
        self, settings: Settings, config: CrawlConfig, f: Frontier, database: Database | None = None
    ) -> None:
        self.settings = settings
        self.config = config
        self._f = f
        self._database = database
        self._read: tuple[float, asyncio.Task[dict[str, Any]]] | None = None

    async def status(self) -> dict[str, Any]:
        """The fleet's status: per domain, its queue, pages per second and freshness."""
        now = time.monotonic()
        if self._read is None or now - self._read[0] > STATUS_FRESH:
            read = asyncio.ensure_future(
                status(self.settings, self.config, self._f.connection, self._database)
            )
            self._read = (now, read)
        _, read = self._read
        try:
            return await asyncio.shield(read)
        except Exception:
            self._read = None  # a failed read is not kept: the next caller asks again
            raise
