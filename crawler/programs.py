"""What every program shares at its command line: one-line errors for bad arguments, and --version."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from crawler import __version__

EXIT_USAGE = 2
EXIT_CLOSED_PIPE = 141  # 128 + SIGPIPE: what a Unix tool's shell reports when its reader went away


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (the usage is one `--help` away), exit 2;
    `version=True` adds --version (a program's parser, not each subcommand's)."""

    def __init__(self, *args: Any, version: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if version:
            self.add_argument("--version", action="version", version=f"%(prog)s {__version__}")

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def closed_pipe() -> int:
    """Our reader went away (`crawler export | head`): stop quietly, as Unix tools do."""
    # Whatever is still buffered for stdout would raise again when Python flushes it at exit.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_CLOSED_PIPE


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop where it is installed: less CPU per message and per request."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop
