"""The content pool: processes that do the heavy work of content (main content, documents) for an
async caller, which awaits each job without blocking its event loop.

Each process (crawler/content/child.py) runs one job at a time, under a time limit (its pool kills
it when a job overruns) and a memory limit (RLIMIT_AS, set in the process itself past what it uses
after start-up). A job past either is refused with a WorkRefused that names the limit; a process that
died (a signal, the OOM killer) likewise; each is replaced in the background, so the caller gets its
answer at once. A process is also replaced after `jobs_per_process` jobs, taking with it whatever a
library leaked. Processes are started by exec, never forked from the caller's threads and sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

from crawler.content.frames import HEADER, MAX_REPLY, frame, unpickle_reply
from crawler.content.refusal import Refusal
from crawler.errors import ConfigError, ContentRefused, WorkRefused

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")

GiB = 1024**3
# What a process imports (and a `module:function` it calls) before it says it is ready: the content
# libraries and the language model, so no job pays for them.
CONTENT_PRELOAD = (
    "crawler.content.jobs",
    "crawler.content.language:load",
    "crawler.content.documents.pdf",
    "crawler.content.documents.office",
    "crawler.content.documents.odf",
)
# Native libraries each start a thread pool of their own per core: a process runs one job at a time,
# and the pool's size is the parallelism.
_ONE_THREAD = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
_RESTART_DELAYS = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


@dataclass(frozen=True, slots=True)
class PoolLimits:
    """A content pool's size and the limits of each job."""

    processes: int = 1
    seconds: float = 30.0  # a job's time limit, from the moment a process takes it
    memory_bytes: int = 1 * GiB  # how much a process may grow past its size after start-up
    jobs_per_process: int = 500  # then the process is replaced
    preload: tuple[str, ...] = CONTENT_PRELOAD
    start_seconds: float = 60.0  # a process not ready by then failed to start

    def __post_init__(self) -> None:
        if self.processes < 1 or self.seconds <= 0 or self.jobs_per_process < 1 or self.memory_bytes < 0:
            raise ValueError(f"content pool limits out of range: {self}")


class _Process:
    """One process of the pool and the pipes to it."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.jobs = 0
        self.usable = True  # False once killed, dead, or it asked to be replaced

    @classmethod
    async def start(cls, limits: PoolLimits) -> _Process:
        command = [sys.executable, "-m", "crawler.content.child", "--memory", str(limits.memory_bytes)]
        if limits.preload:
            command += ["--preload", ",".join(limits.preload)]
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **_ONE_THREAD},
        )
        process = cls(proc)
        try:
            async with asyncio.timeout(limits.start_seconds):
                kind, value = await process._receive()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError) as e:
            await process.kill()
            raise WorkRefused(Refusal.CRASHED, f"a content process did not start: {e!r}") from None
        except BaseException:
            await process.kill()
            raise
        if kind == "unavailable":
            await process.kill()
            raise ConfigError(
                f"content needs the `content` extra's libraries: pip install 'crawler[content]' ({value})"
            )
        if kind != "ready":
            await process.kill()
            raise WorkRefused(Refusal.CRASHED, f"a content process said {kind!r} instead of being ready")
        return process

    async def _receive(self) -> tuple[str, Any]:
        assert self.proc.stdout is not None
        (length,) = HEADER.unpack(await self.proc.stdout.readexactly(HEADER.size))
        if length > MAX_REPLY:
            raise ConnectionError(f"a content process sent a reply of {length:,} bytes")
        data = await self.proc.stdout.readexactly(length)
        try:
            reply = unpickle_reply(data)
        except (pickle.UnpicklingError, AttributeError, ImportError, EOFError, ValueError) as e:
            raise ConnectionError(f"a content process sent a reply the pool refuses: {e}") from None
        if not (isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[0], str)):
            raise ConnectionError("a content process sent a reply of the wrong shape")
        return reply[0], reply[1]

    async def call(self, payload: bytes) -> tuple[str, Any]:
        """Send one job, await its reply."""
        assert self.proc.stdin is not None
        self.jobs += 1
        self.proc.stdin.write(payload)
        await self.proc.stdin.drain()
        return await self._receive()

    async def kill(self) -> None:
        self.usable = False
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        await self.proc.wait()

    async def close(self, grace: float) -> None:
        """Ask the process to end (its stdin closes), and kill it if it has not within `grace`."""
        self.usable = False
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            async with asyncio.timeout(grace):
                await self.proc.wait()
        except TimeoutError:
            await self.kill()

    def death(self) -> str:
        code = self.proc.returncode
        if code is None:
            return "it stopped answering"
        return f"it was killed by signal {-code}" if code < 0 else f"it exited with status {code}"


class ContentPool:
    """`limits.processes` processes for content jobs; use `async with`, then `await pool.run(job, ...)`.

    A job is a module-level function whose arguments pickle; its result is built of built-in values and
    crawler's own classes. It raises ContentRefused (a reader's refusal, passed on as raised) or
    WorkRefused (the pool's: time-limit, memory-limit, crashed, failed).
    """

    def __init__(self, limits: PoolLimits | None = None) -> None:
        self.limits = limits or PoolLimits()
        self._idle: asyncio.Queue[_Process] = asyncio.Queue()
        self._all: set[_Process] = set()
        self._replacing: set[asyncio.Task[None]] = set()
        self._ending: set[asyncio.Task[None]] = set()
        self._open = False
        self.replaced = 0  # processes replaced so far (killed, dead, out of memory, or used up)

    async def __aenter__(self) -> ContentPool:
        started = await asyncio.gather(
            *(_Process.start(self.limits) for _ in range(self.limits.processes)), return_exceptions=True
        )
        failed = [s for s in started if isinstance(s, BaseException)]
        for process in started:
            if isinstance(process, _Process):
                self._all.add(process)
                self._idle.put_nowait(process)
        self._open = True
        if failed:
            await self.aclose()
            raise failed[0]
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self, grace: float = 5.0) -> None:
        """Stop every process: those idle at once, any still running a job after `grace` seconds.

        Its owner stops calling `run` first: a call still waiting for a free process would wait on.
        """
        self._open = False
        for task in list(self._replacing):
            task.cancel()
        await asyncio.gather(*self._replacing, return_exceptions=True)
        await asyncio.gather(
            *(p.close(grace) for p in list(self._all)), *self._ending, return_exceptions=True
        )
        self._all.clear()

    def pids(self) -> list[int]:
        """The process ids of the pool's live processes."""
        return sorted(p.proc.pid for p in self._all if p.usable)

    async def run(self, job: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """`job(*args, **kwargs)` in one of the pool's processes, within the limits."""
        if not self._open:
            raise RuntimeError("the content pool is not open: use it inside `async with`")
        payload = frame((job, args, kwargs))
        process = await self._idle.get()
        try:
            kind, value = await self._call(process, payload)
        finally:
            self._release(process)
        if kind == "ok":
            return value  # type: ignore[no-any-return]
        if kind == "refused" and isinstance(value, ContentRefused):
            raise value
        if kind == "memory":
            raise WorkRefused(
                Refusal.MEMORY_LIMIT, f"past its memory limit of {self.limits.memory_bytes:,} bytes"
            )
        raise WorkRefused(Refusal.FAILED, f"the job failed: {value}")

    async def _call(self, process: _Process, payload: bytes) -> tuple[str, Any]:
        try:
            async with asyncio.timeout(self.limits.seconds):
                kind, value = await process.call(payload)
        except TimeoutError:
            await process.kill()
            raise WorkRefused(
                Refusal.TIME_LIMIT, f"past its time limit of {self.limits.seconds:g} s"
            ) from None
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            await process.kill()
            # A process the kernel killed for memory looks like any other death; say which limit it had.
            raise WorkRefused(
                Refusal.CRASHED, f"its process died: {process.death()} ({type(e).__name__})"
            ) from None
        except BaseException:  # cancelled mid-job: the process's state is unknown
            await process.kill()
            raise
        if kind == "memory":
            process.usable = False  # it exits after saying so
        return kind, value

    def _release(self, process: _Process) -> None:
        """Put `process` back, or start its replacement in the background."""
        if process.usable and process.proc.returncode is None and process.jobs < self.limits.jobs_per_process:
            self._idle.put_nowait(process)
            return
        self._all.discard(process)
        # Used up, it ends on its own once its stdin closes; otherwise it is killed (if not already).
        ending = process.close(grace=5.0) if process.usable else process.kill()
        _track(self._ending, asyncio.create_task(ending))
        if self._open:
            self.replaced += 1
            _track(self._replacing, asyncio.create_task(self._replace()))

    async def _replace(self) -> None:
        for attempt in range(sys.maxsize):
            try:
                process = await _Process.start(self.limits)
            except (WorkRefused, ConfigError, OSError) as e:
                delay = _RESTART_DELAYS[min(attempt, len(_RESTART_DELAYS) - 1)]
                log.warning(
                    "content pool: a replacement process failed to start (%s); again in %gs", e, delay
                )
                await asyncio.sleep(delay)
                continue
            if not self._open:
                await process.close(grace=1.0)
                return
            self._all.add(process)
            self._idle.put_nowait(process)
            return


def _track(tasks: set[asyncio.Task[None]], task: asyncio.Task[None]) -> None:
    tasks.add(task)
    task.add_done_callback(tasks.discard)
