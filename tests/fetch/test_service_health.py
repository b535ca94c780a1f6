"""The fetch service's health as a worker's requests find it: an outage reported once, when it begins."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from crawler.errors import BackendDown, FetchBackendError
from crawler.fetch.service_health import ServiceHealth


async def _failing(health: ServiceHealth, exc: BaseException) -> FetchBackendError:
    with pytest.raises(FetchBackendError) as raised:
        async with health.asking("http://a.test/", 5, streaming=False):
            raise exc
    return raised.value


@pytest.mark.timeout(10)
async def test_an_outage_right_after_a_reported_reset_is_reported_when_it_begins(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = ServiceHealth()
    with caplog.at_level(logging.WARNING, logger="crawler.fetch.service_health"):
        reset = await _failing(health, aiohttp.ClientOSError(104, "Connection reset by peer"))
        refused = [await _failing(health, ConnectionRefusedError(111, "refused")) for _ in range(3)]
        async with health.asking("http://a.test/", 5, streaming=False):
            pass
    assert not isinstance(reset, BackendDown) and all(isinstance(e, BackendDown) for e in refused)
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 3, said  # the reset, the outage once, its end
    assert "its pages are retried; 1 failed fetches" in said[0]
    assert "its domains pause, their pages wait queued; 2 failed fetches" in said[1]
    assert said[2] == "the fetch service answers again after 4 failed fetches"
