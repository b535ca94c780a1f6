"""The fleet's status behind the console's views: one read serves every caller within a second."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from crawler.config import load_config
from crawler.service import control as control_module
from crawler.service.control import Control
from tests.support.services import settings_for
from tests.support.sites import shops, write_config


async def test_views_asked_together_share_one_read_of_the_status(
    amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", shops(3)))
    reads = 0
    real = control_module.status

    async def counted(*args: Any) -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return await real(*args)

    monkeypatch.setattr(control_module, "status", counted)
    async with Control.open(settings, load_config(settings.config_path), "test") as control:
        found = await asyncio.gather(*(control.domains() for _ in range(5)), control.fleet())
        assert reads == 1
        assert all(len(views) == 3 for views in found[:5])
        monkeypatch.setattr(control_module, "STATUS_FRESH", 0.0)
        await control.domains()
        assert reads == 2  # an older read is not served again
