"""The service layer opened on the test's own services, for a config of two shops (never served: the
verbs tested fetch nothing)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crawler.config import load_config
from crawler.service import Control
from crawler.settings import Settings
from tests.support.services import settings_for
from tests.support.sites import shops, write_config


@pytest.fixture
def settings(amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path) -> Settings:
    sites = shops(products=1, hosts=["a.test", "b.test"])
    return settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))


@pytest.fixture
async def control(settings: Settings) -> AsyncIterator[Control]:
    async with Control.open(settings, load_config(settings.config_path), "test") as opened:
        yield opened
