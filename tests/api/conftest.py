"""crawler-api for the tests of this package: each module serves its own `site`, crawled by `settings`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.settings import Settings
from demo.site import Site
from tests.support import api as api_support
from tests.support.api import Api
from tests.support.services import settings_for
from tests.support.sites import write_config


@pytest.fixture
def settings(amqp_url: str, prefix: str, sqlite_url: str, tmp_path: Path, site: Site) -> Settings:
    return settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site]))


@pytest.fixture
def api(settings: Settings) -> Iterator[Api]:
    with api_support.running(settings) as running:
        yield running
