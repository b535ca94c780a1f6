"""One process of a content pool: imports what its jobs need, bounds its own memory, then runs the
jobs its pool sends, one at a time, until its stdin closes.

python -m crawler.content.child --memory BYTES [--preload MODULE[:FUNCTION],...]

Frames (crawler/content/frames.py) come on stdin and go back on stdout; whatever a library prints
goes to stderr. Replies: ("ready", pid) (or ("unavailable", why) if a module to preload is missing),
then per job ("ok", result), ("refused", ContentRefused),
("failed", text) or ("memory", text); after "memory" the process exits, and its pool starts another.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pickle
import resource
import sys
from collections.abc import Sequence
from typing import Any, BinaryIO

from crawler.content.frames import HEADER, frame
from crawler.errors import ContentRefused


def _address_space() -> int:
    """Bytes of address space this process has mapped now (VmSize)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _preload(entries: Sequence[str]) -> None:
    for entry in entries:
        module_name, _, function = entry.partition(":")
        module = importlib.import_module(module_name)
        if function:
            getattr(module, function)()


def _limit_memory(extra: int) -> None:
    """Let this process grow `extra` bytes past its size after start-up, and dump no core."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if extra > 0:
        limit = _address_space() + extra
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _read_frame(stream: BinaryIO) -> bytes | None:
    header = stream.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    data = stream.read(length)
    return data if len(data) == length else None


def _run(data: bytes) -> tuple[str, Any]:
    try:
        job, args, kwargs = pickle.loads(data)
        return "ok", job(*args, **kwargs)
    except MemoryError:
        return "memory", "the job ran out of its memory"
    except ContentRefused as e:
        return "refused", e
    except Exception as e:
        return "failed", f"{type(e).__name__}: {e}"


def serve(inbox: BinaryIO, outbox: BinaryIO) -> None:
    """Run jobs from `inbox` until it closes (or a job runs out of memory), replying on `outbox`."""
    outbox.write(frame(("ready", os.getpid())))
    outbox.flush()
    while (data := _read_frame(inbox)) is not None:
        kind, value = _run(data)
        del data
        try:
            reply = frame((kind, value))
        except MemoryError:
            reply = frame(("memory", "its result did not fit in its memory"))
        except Exception as e:  # a result pickle cannot carry
            reply = frame(("failed", f"its result cannot be sent back: {type(e).__name__}: {e}"))
        del value
        outbox.write(reply)
        outbox.flush()
        if kind == "memory":
            return  # what ran out may have left state half made: a fresh process takes over


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", type=int, default=0, help="bytes a job may grow the process by")
    parser.add_argument("--preload", default="", help="modules to import first, comma-separated")
    args = parser.parse_args(argv)
    # The frames keep stdin and stdout's descriptors; fd 1 becomes stderr, for whatever a library prints.
    inbox = os.fdopen(os.dup(0), "rb")
    outbox = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    try:
        _preload([entry for entry in args.preload.split(",") if entry])
    except ImportError as e:  # the content extra is not installed: the pool says how to fix it
        outbox.write(frame(("unavailable", str(e))))
        outbox.flush()
        sys.exit(1)
    _limit_memory(args.memory)
    with contextlib.suppress(BrokenPipeError):  # the pool is gone
        serve(inbox, outbox)
    sys.exit(0)


if __name__ == "__main__":
    main()
