"""Network namespaces for the tests (bench/netns.py): skipped where this process cannot make them,
except in CI (CI=true), where that fails."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from bench.netns import Netns, unusable
from bench.netns import namespace as _namespace

__all__ = ["Netns", "namespace"]


@contextmanager
def namespace() -> Iterator[Netns]:
    """A fresh namespace joined by a veth pair on unique loopback-range addresses; all removed after."""
    why = unusable()
    if why is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(why)
        pytest.skip(why)
    with _namespace() as ns:
        yield ns
