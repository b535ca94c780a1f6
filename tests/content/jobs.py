"""Jobs the content pool's tests send to its processes (importable there: the processes start in the
tests' working directory)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from crawler.content.refusal import Refusal
from crawler.errors import DocumentRefused


def echo(value: Any) -> tuple[int, Any]:
    """(the process's id, `value`)."""
    return os.getpid(), value


def spin() -> None:
    """Burn CPU for ever."""
    while True:
        pass


def hog(size: int) -> int:
    """Allocate and touch `size` bytes."""
    block = bytearray(size)
    block[::4096] = b"x" * len(block[::4096])
    return len(block)


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def refuse() -> None:
    raise DocumentRefused(Refusal.ENCRYPTED, "a test's refusal")


def explode() -> None:
    raise ValueError("a test's bug")


class _Smuggled:
    """Pickles as a call of os.system: what a process taken over through a parser's bug might send."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def smuggle(marker: str) -> object:
    return _Smuggled(marker)


def meet(folder: str, count: int) -> int:
    """Wait until `count` processes have entered `folder`: only jobs running at once all return."""
    Path(folder, str(os.getpid())).touch()
    while len(list(Path(folder).iterdir())) < count:
        time.sleep(0.01)
    return os.getpid()
