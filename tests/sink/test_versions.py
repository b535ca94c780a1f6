"""Which stored answers make a page's versions, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import sqlalchemy as sa

from crawler.changes.feed import body
from crawler.sink.database import Database
from crawler.sink.sql import PageRecord, Sink, engine_url, migrate
from crawler.sink.tables import PageVersion

URL = "http://a.test/p/1"
UNCHANGED = frozenset({"final_url", "content_type", "title", "data", "signature", "changed_at", "rendered"})
KEPT_STATUS = UNCHANGED | {"status_code", "error"}
# A page's content (`content:` on), as its record holds it and as its version gives it back.
CONTENT = {"markdown": "# Lamp!", "text": "Lamp!", "lang": "en", "simhash": 0xABC}
STORED = CONTENT | {"simhash": "0000000000000abc", "near_duplicate_of": None, "content_refused": None}


@pytest.fixture
def sink(database_url: str) -> Iterator[Sink]:
    migrate(database_url)
    made_db = Database(database_url)
    made = Sink(made_db)
    yield made
    made_db.close()


def page(**changes: Any) -> PageRecord:
    base = PageRecord(
        URL, "a.test", 1, 1, status_code=200, title="Lamp", data={"price": "10"}, signature="s1", history=True
    )
    return replace(base, **changes)


def stored_versions(database_url: str) -> list[tuple[int, str, int | None, str | None]]:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            v = PageVersion
            rows = conn.execute(sa.select(v.version, v.kind, v.status_code, v.title).order_by(v.version))
            return [tuple(r) for r in rows]  # type: ignore[misc]
    finally:
        engine.dispose()


@pytest.mark.timeout(60)
async def test_new_changed_gone_and_back_make_versions_and_nothing_else_does(
    sink: Sink, database_url: str
) -> None:
    made = [
        await sink.store(page()),  # new
        await sink.store(page()),  # the same again (a redelivery): none
        await sink.store(page(status_code=304, signature=None, keep=KEPT_STATUS)),  # a 304: none
        await sink.store(page(title="Lamp!", data={"price": "9", "stock": "3"}, signature="s2", **CONTENT)),
        await sink.store(page(status_code=503, error="HTTP 503", keep=UNCHANGED)),  # failing: none
        await sink.store(page(status_code=410, error="HTTP 410", signature=None, keep=UNCHANGED)),  # gone
        await sink.store(page(status_code=404, error="HTTP 404", signature=None, keep=UNCHANGED)),  # still
        await sink.store(page(title="Lamp!", data={"price": "9", "stock": "3"}, signature="s2", **CONTENT)),
    ]
    assert [(v.version, v.kind) if v else None for v in made] == [
        (1, "new"), None, None, (2, "changed"), None, (3, "gone"), None, (4, "back"),
    ]  # fmt: skip
    changed = made[3]
    assert changed is not None and dict(changed.changes or {}) == {
        "title": ("Lamp", "Lamp!"),
        "price": ("10", "9"),
        "stock": (None, "3"),
    }
    assert stored_versions(database_url) == [
        (1, "new", 200, "Lamp"),
        (2, "changed", 200, "Lamp!"),
        (3, "gone", 410, None),  # its last content stays in version 2
        (4, "back", 200, "Lamp!"),
    ]
    assert [v.content if v else None for v in made] == [None] * 3 + [STORED] + [None] * 3 + [STORED]
    again = await sink.versions_after(URL, 2)  # what a redelivered refresh scheduled at version 2 announces
    assert [(v.version, v.kind, v.content) for v in again] == [(3, "gone", None), (4, "back", STORED)]
    first = await sink.versions_after(URL, 1)
    assert first[0].changes is not None and first[0].changes["stock"] == (None, "3")
    assert made[3] is not None and body(first[0]) == body(made[3])  # published again, the same message


@pytest.mark.timeout(60)
async def test_a_broken_link_a_domain_without_history_and_a_batch_make_no_stray_versions(
    sink: Sink, database_url: str
) -> None:
    assert await sink.store(page(url="http://a.test/missing", status_code=404, error="HTTP 404")) is None
    assert await sink.store(page(url="http://a.test/off", history=False)) is None
    # Two deliveries of one page in one batch: the last one's row, one version.
    made = await sink.store_many([page(signature="x"), page(signature="y", title="Other")])
    assert [(v.version, v.kind) for v in made.values()] == [(1, "new")]
    assert stored_versions(database_url) == [(1, "new", 200, "Other")]
