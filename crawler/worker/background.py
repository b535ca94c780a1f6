"""Helpers that run alongside a block of work: started with it, cancelled when it ends."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

log = logging.getLogger(__name__)


@asynccontextmanager
async def background(*coros: Coroutine[Any, Any, None]) -> AsyncIterator[None]:
    """Run `coros` as tasks for the length of the block; a helper's failure is logged, not raised."""
    tasks = [asyncio.create_task(c, name=getattr(c, "__qualname__", None)) for c in coros]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for task, result in zip(tasks, results, strict=True):
            if isinstance(result, Exception):
                log.error("%s failed: %r", task.get_name(), result)
