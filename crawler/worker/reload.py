"""Live configuration: domains.yaml watched for edits (or SIGHUP), each edit validated before it applies."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from crawler.config import CrawlConfig, load_config
from crawler.errors import ConfigError
from crawler.stopping import still_cancelled

log = logging.getLogger(__name__)


class ConfigWatcher:
    """Calls `apply` with each valid edit of `path`; an invalid one is refused and the running one stays."""

    def __init__(self, path: str, apply: Callable[[CrawlConfig], Awaitable[None]], poll: float) -> None:
        self.path = Path(path)
        self.wake = asyncio.Event()  # set (by SIGHUP) to reload now, edited or not
        self._apply = apply
        self._poll = poll

    async def run(self) -> None:
        """Watch until cancelled."""
        seen = _mtime(self.path)
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), self._poll)
            changed = _mtime(self.path)
            if not self.wake.is_set() and changed == seen:
                continue
            self.wake.clear()
            seen = changed
            try:
                await self._apply(load_config(self.path))
            except ConfigError as exc:
                log.error("edit of %s refused, the running configuration stays:\n%s", self.path, exc)
            except Exception as exc:  # the broker is away: keep watching, try again on the next edit
                still_cancelled()
                log.error("edit of %s not applied (%r); the running configuration stays", self.path, exc)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None
