"""`crawler crawl`'s progress: rows from the metrics, a live table on a terminal, log lines elsewhere."""

from __future__ import annotations

import asyncio
import io
import logging
from pathlib import Path

import pytest

from crawler.monitor.metrics import Metrics
from crawler.monitor.progress import Progress
from demo.site import serve
from tests.support.services import run, settings_for
from tests.support.sites import reachable, shops, write_config
from tests.support.wait import until


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def busy_metrics() -> Metrics:
    m = Metrics()
    for _ in range(3):
        m.observe_outcome("a.test", "ok", 200)
    m.observe_outcome("a.test", "failed", 404)
    m.observe_fetch("a.test", 0.1, 404)
    m.observe_queue("crawler.domain.a.test", "domain", "a.test", 17, 1)
    m.message_started("a.test")
    return m


def test_rows_and_the_recent_rate() -> None:
    m = busy_metrics()
    progress = Progress(m, ["a.test", "b.test"], stream=io.StringIO())
    first, other = progress.rows(now=100.0)
    assert (first.domain, first.done, first.queued, first.inflight, first.errors) == ("a.test", 4, 17, 1, 1)
    assert first.rate == 0.0  # one look is no rate yet
    assert (other.done, other.queued) == (0, None)
    for _ in range(10):
        m.observe_outcome("a.test", "ok", 200)
    first, _ = progress.rows(now=102.0)
    assert first.rate == pytest.approx(5.0)  # 10 pages in 2 s
    first, _ = progress.rows(now=120.0)  # nothing for a while: the window slides past the burst
    assert first.rate == pytest.approx(0.0)


async def test_without_a_terminal_progress_is_log_lines(caplog: pytest.LogCaptureFixture) -> None:
    progress = Progress(busy_metrics(), ["a.test"], stream=io.StringIO(), every=0.01)
    assert not progress.live
    task = asyncio.create_task(progress.run())

    async def lines() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "crawler.monitor.progress"]

    with caplog.at_level(logging.INFO, logger="crawler.monitor.progress"):
        try:
            found = await until(lines, lambda ls: len(ls) >= 2, within=30, what="two progress lines")
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert found[0] == "progress a.test: done=4 queued=17 in_flight=1 rate=0.0/s errors=1"


async def test_on_a_terminal_progress_is_a_live_table() -> None:
    out = _Terminal()
    progress = Progress(busy_metrics(), ["a.test", "b.test"], stream=out, every=0.01)
    assert progress.live
    task = asyncio.create_task(progress.run())

    async def text() -> str:
        return out.getvalue()

    try:
        shown = await until(text, lambda t: "b.test" in t and "17" in t, within=10, what="the table")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert "crawl progress" in shown and "pages/s" in shown and "in flight" in shown


async def test_crawl_without_a_terminal_prints_the_summary_and_no_live_display(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    sites = shops(products=3, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", sites))
    with serve(*sites):
        result = run("crawler", ["crawl", sites[0].url()], settings)
    assert result.returncode == 0, result.stderr
    assert f"{len(reachable(sites))} pages in" in result.stdout
    assert "\x1b[" not in result.stderr + result.stdout  # no terminal control sequences in a log
