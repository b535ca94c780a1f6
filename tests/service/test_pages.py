"""Stored pages through the service layer: a page that is not stored is said to be missing, and how
to find one."""

from __future__ import annotations

import pytest

from crawler.errors import NotFound
from crawler.service import Control


async def test_a_page_not_stored_is_not_found_by_url_id_or_archive(control: Control) -> None:
    with pytest.raises(NotFound, match=r"no page is stored for http://a\.test/nothing$"):
        await control.pages.at("http://a.test/nothing#here")
    with pytest.raises(NotFound, match="GET /v1/pages"):
        await control.pages.versions(1)
    with pytest.raises(NotFound, match="GET /v1/pages"):
        await control.pages.archived(1)
