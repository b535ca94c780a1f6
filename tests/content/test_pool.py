"""The content pool: jobs run in processes of its own, in parallel, within a time and a memory limit;
a process past either, or dead, is refused and replaced; the caller's event loop never waits."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from crawler.content.pool import ContentPool, PoolLimits
from crawler.content.refusal import Refusal
from crawler.errors import ConfigError, DocumentRefused, WorkRefused
from tests.content import jobs

MiB = 1024 * 1024


@asynccontextmanager
async def pool(**limits: object) -> AsyncIterator[ContentPool]:
    settings = {"preload": (), "seconds": 10.0, "memory_bytes": 256 * MiB, **limits}
    async with ContentPool(PoolLimits(**settings)) as opened:  # type: ignore[arg-type]
        yield opened


async def replaced(content: ContentPool, count: int) -> list[int]:
    """The pool's process ids once `count` processes have been replaced and are ready."""
    while content.replaced < count or len(content.pids()) < content.limits.processes:
        await asyncio.sleep(0.01)
    return content.pids()


class Ticker:
    """Measures the event loop's longest wait between turns while jobs run elsewhere."""

    def __init__(self) -> None:
        self.ticks = 0
        self.longest = 0.0

    async def run(self) -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            self.ticks += 1
            self.longest = max(self.longest, now - last)
            last = now


async def test_a_job_runs_in_a_process_of_the_pools_own() -> None:
    async with pool() as content:
        pid, value = await content.run(jobs.echo, {"a": [1, 2]})
        assert value == {"a": [1, 2]}
        assert pid != os.getpid() and content.pids() == [pid]


async def test_a_job_past_its_time_is_refused_its_process_replaced_and_the_loop_never_waits() -> None:
    async with pool(seconds=1.0) as content:
        before = content.pids()
        ticker = Ticker()
        ticking = asyncio.create_task(ticker.run())
        with pytest.raises(WorkRefused) as refused:
            await content.run(jobs.spin)
        ticking.cancel()
        assert refused.value.reason == Refusal.TIME_LIMIT and "time limit of 1 s" in str(refused.value)
        # The loop turned all along the second: a job run on it would have held it the whole second.
        assert ticker.ticks > 0 and ticker.longest < 0.5
        after = await replaced(content, 1)
        assert after != before
        pid, _ = await content.run(jobs.echo, None)
        assert [pid] == after


async def test_a_job_past_its_memory_is_refused_and_the_next_one_runs() -> None:
    async with pool(memory_bytes=64 * MiB) as content:
        assert await content.run(jobs.hog, 16 * MiB) == 16 * MiB
        with pytest.raises(WorkRefused) as refused:
            await content.run(jobs.hog, 512 * MiB)
        assert refused.value.reason == Refusal.MEMORY_LIMIT
        await replaced(content, 1)
        assert await content.run(jobs.hog, 16 * MiB) == 16 * MiB


async def test_a_dead_process_is_refused_and_replaced() -> None:
    async with pool() as content:
        with pytest.raises(WorkRefused) as refused:
            await content.run(jobs.die)
        # Its pipe may break before its exit status is read: the status then says less than the signal.
        assert refused.value.reason == Refusal.CRASHED and "its process died" in str(refused.value)
        await replaced(content, 1)
        assert (await content.run(jobs.echo, 1))[1] == 1


async def test_a_readers_refusal_passes_through_and_a_bug_is_named() -> None:
    async with pool() as content:
        with pytest.raises(DocumentRefused) as refused:
            await content.run(jobs.refuse)
        assert refused.value.reason == Refusal.ENCRYPTED and str(refused.value) == "a test's refusal"
        with pytest.raises(WorkRefused) as failed:
            await content.run(jobs.explode)
        assert failed.value.reason == Refusal.FAILED and "ValueError: a test's bug" in str(failed.value)
        assert content.replaced == 0  # neither needs a new process


async def test_a_reply_that_would_run_code_in_the_caller_is_refused(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    async with pool() as content:
        with pytest.raises(WorkRefused) as refused:
            await content.run(jobs.smuggle, str(marker))
        assert refused.value.reason == Refusal.CRASHED
        await replaced(content, 1)
    assert not marker.exists()


async def test_jobs_run_at_once_in_as_many_processes(tmp_path: Path) -> None:
    async with pool(processes=3, seconds=20.0) as content:
        pids = await asyncio.gather(*(content.run(jobs.meet, str(tmp_path), 3) for _ in range(3)))
        assert len(set(pids)) == 3


async def test_a_process_is_replaced_after_its_jobs() -> None:
    async with pool(jobs_per_process=2) as content:
        first = {(await content.run(jobs.echo, i))[0] for i in range(2)}
        after = await replaced(content, 1)
        assert len(first) == 1 and after != sorted(first)
        assert (await content.run(jobs.echo, 3))[0] == after[0]


async def test_a_cancelled_job_takes_its_process_with_it() -> None:
    async with pool() as content:
        running = asyncio.create_task(content.run(jobs.spin))
        while content._idle.qsize():  # the job has its process
            await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        await replaced(content, 1)
        assert (await content.run(jobs.echo, 2))[1] == 2


async def test_a_pool_used_outside_its_context_says_so() -> None:
    content = ContentPool(PoolLimits(preload=()))
    with pytest.raises(RuntimeError, match="async with"):
        await content.run(jobs.echo, 1)
    with pytest.raises(ValueError, match="out of range"):
        PoolLimits(processes=0)


async def test_a_pool_without_its_libraries_says_which_extra_to_install() -> None:
    with pytest.raises(ConfigError, match=r"pip install 'crawler\[content\]'.*no_such_library"):
        async with pool(preload=("crawler.content.main", "no_such_library")):
            pass
