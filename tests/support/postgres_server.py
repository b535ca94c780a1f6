"""The `private_pg` fixture: a PostgreSQL cluster of the test's own (bench/postgres.py), which it may
restart; never the shared one on :5432."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.postgres import PrivatePostgres, private_postgres


@pytest.fixture
def private_pg() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL cluster the test may restart; deleted after it."""
    with private_postgres() as server:
        yield server
