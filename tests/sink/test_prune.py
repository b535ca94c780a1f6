"""`crawler history prune` against real SQLite and PostgreSQL: the newest `keep` stay, old ones go, a page's
newest version never does."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from crawler.config import History
from crawler.settings import Settings
from crawler.sink.database import Database
from crawler.sink.prune import Pruner
from crawler.sink.sql import PageRecord, create_sink_engine, engine_url
from crawler.sink.tables import Page, PageVersion
from tests.support import versions
from tests.support.services import run
from tests.support.versions import DAY, T0

LONG = 365 * 86_400.0  # older than any test version gets


def stored(database_url: str) -> dict[str, list[int]]:
    """Per url, the numbers of its stored versions, oldest first."""
    engine = create_sink_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(Page.url, PageVersion.version)
                .join(Page, Page.id == PageVersion.page_id)
                .order_by(Page.url, PageVersion.version)
            ).all()
    finally:
        engine.dispose()
    out: dict[str, list[int]] = {}
    for url, number in rows:
        out.setdefault(url, []).append(number)
    return out


def daily(url: str, days: int) -> list[list[PageRecord]]:
    """`url` changed once a day for `days` days from T0: versions 1..days."""
    return versions.changes(url, [T0 + i * DAY for i in range(days)])


@pytest.fixture
def pruner(database_url: str) -> Iterator[Pruner]:
    # Batches this small take the keyset and the deletes through many rounds.
    p_db = Database(database_url)
    p = Pruner(p_db, pages=2, batch=3)
    yield p
    p_db.close()


@pytest.mark.timeout(60)
async def test_the_newest_keep_versions_of_each_page_stay(database_url: str, pruner: Pruner) -> None:
    pages = [f"https://shop.test/p/{i}" for i in range(5)]
    await versions.store(
        database_url, [[versions.answer(url, T0 + i * DAY, f"s{i}") for url in pages] for i in range(6)]
    )
    await versions.store(database_url, daily("https://shop.test/few", 2) + daily("https://blog.test/", 6))
    deleted = pruner.prune("shop.test", History(keep=3, max_age=LONG), now=T0 + 7 * DAY)
    assert deleted == 5 * 3
    after = stored(database_url)
    assert all(after[url] == [4, 5, 6] for url in pages)
    assert after["https://shop.test/few"] == [1, 2]
    assert after["https://blog.test/"] == [1, 2, 3, 4, 5, 6]  # another domain's, untouched
    assert pruner.prune("shop.test", History(keep=3, max_age=LONG), now=T0 + 7 * DAY) == 0


@pytest.mark.timeout(60)
async def test_versions_older_than_max_age_go_but_never_a_pages_newest(
    database_url: str, pruner: Pruner
) -> None:
    await versions.store(
        database_url,
        daily("https://shop.test/busy", 6)
        + daily("https://shop.test/quiet", 2)
        + daily("https://shop.test/one", 1),
    )
    # Now T0 + 6 days, max_age 2.5 days: what was fetched before T0 + 3.5 days is old.
    deleted = pruner.prune("shop.test", History(keep=100, max_age=2.5 * 86_400), now=T0 + 6 * DAY)
    assert deleted == 4 + 1
    assert stored(database_url) == {
        "https://shop.test/busy": [5, 6],
        "https://shop.test/quiet": [2],  # old, but its newest
        "https://shop.test/one": [1],
    }
    # Versions go on from the newest left.
    await versions.store(database_url, [[versions.answer("https://shop.test/quiet", T0 + 7 * DAY, "new")]])
    assert stored(database_url)["https://shop.test/quiet"] == [2, 3]


@pytest.mark.timeout(60)
async def test_a_dry_run_counts_and_deletes_nothing(database_url: str, pruner: Pruner) -> None:
    await versions.store(database_url, daily("https://shop.test/p", 5))
    history = History(keep=2, max_age=LONG)
    assert pruner.prune("shop.test", history, dry_run=True, now=T0 + 6 * DAY) == 3
    assert stored(database_url) == {"https://shop.test/p": [1, 2, 3, 4, 5]}
    assert pruner.prune("shop.test", history, now=T0 + 6 * DAY) == 3
    assert stored(database_url) == {"https://shop.test/p": [4, 5]}


@pytest.mark.timeout(60)
async def test_the_command_prunes_each_domain_and_leaves_history_off_alone(
    database_url: str, tmp_path: Path
) -> None:
    await versions.store(database_url, daily("https://shop.test/p", 4) + daily("https://blog.test/", 4))
    config = tmp_path / "domains.yaml"
    config.write_text("domains:\n  shop.test: {history: {keep: 1}}\n  blog.test: {history: off}\n")
    settings = Settings(database_url=database_url, config_path=str(config))

    def prune(*args: str) -> subprocess.CompletedProcess[str]:
        done = run("crawler", ["history", "prune", *args], settings)
        assert "Traceback" not in done.stderr
        return done

    done = prune("--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n") == [
        "blog.test                history off: its versions left alone",
        "shop.test                         3 versions would be deleted (dry run)",
        "",
    ]
    done = prune("--domain", "shop.test")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "shop.test                         3 versions deleted\n"
    assert stored(database_url) == {"https://shop.test/p": [4], "https://blog.test/": [1, 2, 3, 4]}
    done = prune("--domain", "elsewhere.test")
    assert done.returncode == 2 and "not configured in domains.yaml: elsewhere.test" in done.stderr
