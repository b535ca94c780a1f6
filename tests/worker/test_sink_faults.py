"""The sink full or read-only mid-crawl: clear errors, nothing acked that was not stored, and the
crawl resumes by itself once the database takes writes again."""

from __future__ import annotations

import asyncio
import random
import string
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
import yaml
from psycopg import sql

from bench.postgres import PrivatePostgres
from crawler.names import Names
from crawler.sink.sql import migrate
from demo.site import Route, Site, free_port, page, serve
from tests.conftest import PG_SERVER
from tests.support.crawls import consumer, finish, seed, stored
from tests.support.services import consumers, settings_for
from tests.support.sites import IPS, reachable, shops, write_config
from tests.support.wait import until


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KB tmpfs (root only: the CI runs as root), unmounted after."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)], check=False)
    if done.returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def crawl_through_an_outage(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    database_url: str,
    break_sink: Callable[[], object],
    restore: Callable[[], object],
) -> str:
    """Crawl a shop whose sink stops taking writes once a few pages are stored, and takes them again
    once more pages were fetched and not stored. The consumers' stderr."""
    sites = shops(products=60, hosts=["a.test"])
    settings = settings_for(
        amqp_url, prefix, database_url, write_config(tmp_path / "d.yaml", sites, retry_delays=[0.2, 0.5])
    )
    with serve(*sites):
        await seed(settings, *(s.url() for s in sites))
        workers = [consumer(settings, "--burst") for _ in range(2)]
        try:
            await until(lambda: len(stored(database_url)) >= 3, within=60, what="a few pages stored")
            # Both started (their start-up migrates the schema, which the outage would refuse).
            queue = Names(settings.prefix).domain_queue("a.test")
            await until(lambda: consumers(amqp_url, queue), lambda n: n >= 2, within=60, what="both in")
            break_sink()
            before = len(stored(database_url))
            fetched = len(sites[0].requests)
            await until(lambda: len(sites[0].requests) >= fetched + 8, within=60, what="more fetched")
            # Fetched while the sink refused them: not stored, so not acked as done.
            assert len(stored(database_url)) < len({path for _, path in sites[0].requests}), before
            restore()
        except AssertionError as exc:
            for worker in workers:
                worker.kill()
            raise AssertionError(f"{exc}\n" + "".join(w.communicate()[1] for w in workers)) from None
        errors = await asyncio.to_thread(finish, *workers, timeout=120)
    rows = [r[0] for r in stored(database_url)]
    assert sorted(rows) == sorted(reachable(sites))  # every page, once
    return "".join(errors)


@pytest.mark.timeout(180)
async def test_a_full_disk_under_sqlite_holds_the_crawl_until_space_returns(
    tmp_path: Path, amqp_url: str, prefix: str, small_disk: Path
) -> None:
    from crawler.sink.sql import migrate

    database_url = f"sqlite:///{small_disk / 'crawl.db'}"
    await asyncio.to_thread(migrate, database_url)
    # 30 pages of 30 KB each, every byte of it extracted: the crawl fills the disk by itself.
    blob = "".join(random.Random(0).choices(string.ascii_letters, k=30_000))
    paths = [f"/p/{i}" for i in range(30)]
    routes: dict[str, Route] = {"/": page("home", paths)}
    routes |= {p: page(p, [], extra=f'<p class="blob">{p}{blob}</p>') for p in paths}
    site = Site("a.test", IPS["a.test"], free_port(IPS["a.test"]), routes)
    config = write_config(tmp_path / "d.yaml", [site], retry_delays=[0.2, 0.5])
    raw = yaml.safe_load(config.read_text())
    raw["domains"]["a.test"]["extract"]["blob"] = "p.blob"
    config.write_text(yaml.safe_dump(raw))
    settings = settings_for(amqp_url, prefix, database_url, config)
    with serve(site):
        await seed(settings, site.url())
        workers = [consumer(settings, "--burst") for _ in range(2)]
        try:
            # Full: every page was fetched, some not stored, and they are being tried again.
            await until(lambda: all(site.hits(p) for p in paths), within=60, what="every page fetched")
            await until(lambda: len(site.requests) > len(routes) + 4, within=60, what="refetches")
            assert len(stored(database_url)) < len(routes)
            subprocess.run(["mount", "-o", "remount,size=16m", str(small_disk)], check=True)
        except AssertionError as exc:
            for worker in workers:
                worker.kill()
            raise AssertionError(f"{exc}\n" + "".join(w.communicate()[1] for w in workers)) from None
        logs = "".join(await asyncio.to_thread(finish, *workers, timeout=120))
    assert sorted(r[0] for r in stored(database_url)) == sorted(site.url(p) for p in routes)
    assert "failed: database or disk is full" in logs, logs


@pytest.mark.timeout(180)
async def test_a_read_only_postgresql_holds_the_crawl_until_it_takes_writes(
    tmp_path: Path, amqp_url: str, prefix: str, pg_url: str
) -> None:
    from crawler.sink.sql import migrate

    await asyncio.to_thread(migrate, pg_url)
    name = sql.Identifier(pg_url.rsplit("/", 1)[1])

    def read_only(on: bool) -> None:
        with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
            admin.execute(
                sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = {}").format(
                    name, sql.SQL("on" if on else "off")
                )
            )
            if on:  # sessions already open keep writing: end them, as a failover would
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    (pg_url.rsplit("/", 1)[1],),
                )

    logs = await crawl_through_an_outage(
        tmp_path, amqp_url, prefix, pg_url, lambda: read_only(True), lambda: read_only(False)
    )
    assert "cannot execute INSERT in a read-only transaction" in logs, logs


@pytest.mark.timeout(240)
async def test_postgresql_restarted_mid_crawl_the_sink_reconnects_and_no_page_is_acked_without_its_row(
    tmp_path: Path, amqp_url: str, prefix: str, private_pg: PrivatePostgres
) -> None:
    # A cluster of the test's own, stopped as by a crash (what was under way is lost, recovered at
    # start): every connection of every consumer breaks mid-transaction.
    with psycopg.connect(private_pg.url(), autocommit=True) as admin:
        admin.execute("CREATE DATABASE crawl")
    database_url = private_pg.url("crawl")
    await asyncio.to_thread(migrate, database_url)

    def restart() -> None:
        private_pg.restart("immediate")

    errors = await crawl_through_an_outage(tmp_path, amqp_url, prefix, database_url, restart, lambda: None)
    assert private_pg.restarts == 1
    assert "Traceback" not in errors, errors
