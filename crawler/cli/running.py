"""How a command runs to its exit status: its configuration loaded once, its errors said in one
line, a destructive one confirmed first."""

from __future__ import annotations

import argparse
import asyncio
import sys
import traceback
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from crawler import stopping
from crawler.config import CrawlConfig, load_effective
from crawler.errors import CrawlerError
from crawler.programs import EXIT_USAGE, closed_pipe, loop_factory
from crawler.redact import redact
from crawler.settings import Settings

EXIT_OK = 0
EXIT_BUG = 1
EXIT_INTERRUPTED = 130

Work = Callable[[Settings, CrawlConfig], Coroutine[Any, Any, int]]


def settings_and_config(args: argparse.Namespace) -> tuple[Settings, CrawlConfig]:
    """The settings from the environment (`--config` over its path) and the configuration they say."""
    settings = Settings.from_env()
    if args.config:
        settings = replace(settings, config_path=args.config)
    return settings, load_effective(settings)


def configured(args: argparse.Namespace, work: Work, *, drains: bool = False) -> int:
    """Run `work` with the settings and the effective configuration, loaded once as it starts."""

    async def main() -> int:
        return await work(*settings_and_config(args))

    return run(main, drains=drains)


def run(coro: Callable[[], Coroutine[Any, Any, int]], *, drains: bool = False) -> int:
    """Run a command; one that `drains` (consumes) stops cleanly on SIGTERM, at start-up too (exit 0)."""
    try:
        with asyncio.Runner(loop_factory=loop_factory()) as runner:
            if not drains:
                return runner.run(coro())
            done = stopping.run(runner, coro)
            return EXIT_OK if done is None else done
    except CrawlerError as exc:
        return failed(exc)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return closed_pipe()
    except Exception:
        # A bug: its traceback is worth having, but not with a service password in it.
        print(redact(traceback.format_exc()), file=sys.stderr, end="")
        return EXIT_BUG


def failed(exc: CrawlerError) -> int:
    """Bad input or a service out of reach, said in one line."""
    print(f"crawler: error: {redact(str(exc))}", file=sys.stderr)
    return EXIT_USAGE


def usage(args: argparse.Namespace, message: str) -> int:
    """A bad command line, said in one line as argparse says its own."""
    command = f"crawler {args.command}"
    print(f"{command}: error: {redact(message)} (see {command} --help)", file=sys.stderr)
    return EXIT_USAGE


def confirmed(args: argparse.Namespace, question: str) -> bool:
    """False if a person did not say yes to what the command destroys (`--yes` says it)."""
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print(f"crawler: {question} Pass --yes to confirm without a terminal.", file=sys.stderr)
        return False
    return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
