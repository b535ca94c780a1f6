"""Each program's first instruction: SIGTERM is taken (crawler/stopping.py) before anything else is
imported, then the program's own module is imported and run. Importing the crawler takes seconds of
CPU on a busy node, long enough for Kubernetes to send a pod that has just started its SIGTERM. Then
the open-files limit is raised (crawler/descriptors.py), and once the program is imported the garbage
collector is set for a long run (crawler/heap.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from crawler import descriptors, heap, stopping


def _launch(target: str) -> int:
    stopping.install()
    descriptors.raise_open_files()
    module, _, name = target.partition(":")
    main = cast(Callable[[], int], getattr(importlib.import_module(module), name))
    heap.settle()
    return main()


def crawler() -> int:
    """`crawler`."""
    return _launch("crawler.cli:main")


def consume() -> int:
    """`crawler-consume`."""
    return _launch("crawler.cli:consume_main")


def scheduler() -> int:
    """`crawler-scheduler`."""
    return _launch("crawler.scheduler.cli:main")


def api() -> int:
    """`crawler-api`."""
    return _launch("crawler.api.main:main")


def gateway() -> int:
    """`crawler-gateway`."""
    return _launch("crawler.gateway.cli:main")
