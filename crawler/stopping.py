"""SIGTERM from a program's first instruction: noted until the program can drain, then drained.

Kubernetes (and KEDA, scaling down) sends SIGTERM to a pod that may have just started. Taken from the
first instruction (crawler/launch.py), a SIGTERM is never the kernel's default (death, -15): before
the event loop it is noted; while the program starts it ends the start-up (its context managers close
what was opened); once the program drains on signals itself (`handled`), it drains. Each way, exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

T = TypeVar("T")

_asked: list[signal.Signals] = []  # SIGTERMs received, in order
_installed: list[bool] = []  # install() ran: this process is a program started by crawler/launch.py


def install() -> None:
    """Note SIGTERM from now on (a program's first instruction), until the program takes it itself."""
    signal.signal(signal.SIGTERM, _note)
    _installed.append(True)


def asked() -> bool:
    """Whether a SIGTERM came."""
    return bool(_asked)


def let_go() -> None:
    """For a program that does not drain (a one-shot command): SIGTERM ends it as the kernel would,
    a SIGTERM that came already at once."""
    if not _installed:
        return
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _asked:
        signal.raise_signal(signal.SIGTERM)


def _note(signum: int, frame: object = None) -> None:
    _asked.append(signal.Signals(signum))


def _note_again() -> None:
    """After the loop lets SIGTERM go (its removal leaves the kernel's default), note it again."""
    if _installed:
        with contextlib.suppress(ValueError):  # not the main thread: signals are not ours to take
            signal.signal(signal.SIGTERM, _note)


def run(runner: asyncio.Runner, main: Callable[[], Coroutine[Any, Any, T]]) -> T | None:
    """Run `main()` on `runner`; None if a SIGTERM came before it took signals itself (`handled`):
    then its start-up is cancelled (or never begun) and it ends as cleanly as it would have stopped."""
    if _asked:
        return None

    async def starting() -> T | None:
        task = asyncio.current_task()
        assert task is not None

        def cancel() -> None:
            _note(signal.SIGTERM)
            task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, cancel)
        if _asked:  # between the look above and the handler
            return None
        try:
            return await main()
        except asyncio.CancelledError:
            if _asked and task.cancelling() <= 1:
                return None
            raise

    try:
        return runner.run(starting())
    finally:
        _note_again()


@contextlib.contextmanager
def handled(
    stop: Callable[[signal.Signals], None], signals: tuple[signal.Signals, ...] = ()
) -> Iterator[None]:
    """For the block: SIGTERM (and `signals`) call `stop`, at once if a SIGTERM came before. After it
    SIGTERM is only noted (the program is ending), the others have their defaults back."""
    loop = asyncio.get_running_loop()
    taken = (signal.SIGTERM, *signals)
    for sig in taken:
        loop.add_signal_handler(sig, stop, sig)
    if _asked:
        loop.call_soon(stop, _asked[0])
    try:
        yield
    finally:
        for sig in taken:
            loop.remove_signal_handler(sig)
        _note_again()


def still_cancelled() -> None:
    """Raise CancelledError if this task was asked to stop: a cancellation that landed inside a call
    can come out of it as another error (Python 3.11's asyncio.timeout turns one into a timeout when
    both fall at once; a channel opened as it came may fail instead), and a loop that retries on
    errors would otherwise go on, holding its owner's stop for ever."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
