"""Domains through the service layer: each configured one listed, paused and resumed fleet-wide."""

from __future__ import annotations

import pytest

from crawler.errors import NotFound
from crawler.service import Control


async def test_a_domain_is_paused_and_resumed_and_an_unknown_one_is_not_found(control: Control) -> None:
    domains = control.domains
    assert {d.domain: d.paused for d in await domains.listed()} == {"a.test": False, "b.test": False}
    assert await domains.pause("a.test") == "a.test"
    assert {d.domain for d in await domains.listed() if d.paused} == {"a.test"}
    assert await domains.resume("a.test") == "a.test"
    assert not any(d.paused for d in await domains.listed())
    with pytest.raises(NotFound):
        await domains.pause("elsewhere.test")
    with pytest.raises(NotFound):
        await control.recrawls.read_sitemaps("elsewhere.test")
