"""The fleet and recrawls through the service layer: services ready, no worker yet, freshness per
domain, a recrawl with nothing stored."""

from __future__ import annotations

from crawler.service import Control


async def test_the_services_are_ready_and_no_worker_beats_yet(control: Control) -> None:
    assert await control.fleet.readiness() == {"rabbitmq": "ok", "redis": "ok", "database": "ok"}
    assert await control.fleet.worker_count() == 0
    view = await control.fleet.view()
    assert view.workers == [] and view.gateways == []
    assert sorted(f.domain for f in view.freshness) == ["a.test", "b.test"]


async def test_a_recrawl_with_nothing_stored_publishes_nothing(control: Control) -> None:
    done = await control.recrawls.recrawl(["a.test"], every=True)
    assert done.published == {"a.test": 0} and done.due == {"a.test": 0}
