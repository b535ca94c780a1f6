"""Redis restarted empty mid-crawl (it keeps nothing on disk): the crawl ends with every page stored
once, no page of the site fetched twice and the domain's rate kept, checked from the site's request
log and the sink."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from collections import Counter
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from bench.crash import max_in_window
from crawler.names import Names
from crawler.sink.sql import engine_url
from demo.site import Reply, Site, page, serve
from tests.fetch.test_ratelimit import leaf_site
from tests.support.crawls import consumer, finish, stopped, stored
from tests.support.redis_server import PrivateRedis
from tests.support.services import consumers, run, settings_for
from tests.support.sites import after_requests, reachable, shops, slow, write_config
from tests.support.wait import until


def ended(workers: list[subprocess.Popen[str]], timeout: float = 180) -> list[tuple[int, str]]:
    """Each worker's exit code and stderr, once all have exited (killed past `timeout`)."""
    out = []
    for worker in workers:
        try:
            _, err = worker.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            worker.kill()
            _, err = worker.communicate()
        out.append((worker.returncode, err))
    return out


def fetched_twice(sites: list[Site]) -> Counter[str]:
    """Requests for a page beyond its first, by URL (robots.txt aside: its cache starts over by design)."""
    counts = Counter(s.url(path) for s in sites for _, path in s.requests if path != "/robots.txt")
    return Counter({url: n - 1 for url, n in counts.items() if n > 1})


def refetches(sites: list[Site]) -> int:
    """Requests for a page beyond its first."""
    return sum(fetched_twice(sites).values())


@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    ("database_url", "dedup"), [("sqlite", None), ("postgresql", "compact")], indirect=["database_url"]
)
async def test_redis_restarted_empty_mid_crawl_refetches_nothing_and_stores_each_page_once(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    database_url: str,
    dedup: str | None,
    private_redis: PrivateRedis,
) -> None:
    sites = shops(products=80)
    for site in sites:
        slow(site, 0.02)
    settings = settings_for(amqp_url, prefix, database_url, write_config(tmp_path / "d.yaml", sites))
    settings = replace(settings, redis_url=private_redis.url, dedup=dedup)
    expected = reachable(sites)
    with serve(*sites):
        seeded = await asyncio.to_thread(run, "crawler", ["seed", *(s.url() for s in sites)], settings)
        assert seeded.returncode == 0, seeded.stderr
        workers = [consumer(settings, "--burst", "--prefetch", "4", "-v") for _ in range(2)]
        assert await asyncio.to_thread(after_requests(sites, len(expected) // 3).wait, 60)
        await asyncio.to_thread(private_redis.restart_empty)
        before = len(stored(database_url))
        assert before < len(expected)  # it really was lost mid-crawl
        errors = await asyncio.to_thread(ended, workers)
    rows = [r[0] for r in stored(database_url)]
    duplicates = len(rows) - len(set(rows))
    print(  # the figures docs/faults.md quotes
        f"\nredis lost after {before} of {len(expected)} pages stored: "
        f"{refetches(sites)} refetches, {duplicates} duplicate rows, {len(set(rows))} rows"
    )
    for returncode, err in errors:
        assert returncode == 0 and "Traceback" not in err, err
    # The loss was seen and one consumer rebuilt the store from the pages stored before it.
    assert sum("rebuilt the dedup store" in err for _, err in errors) == 1
    assert set(rows) == expected
    assert duplicates == 0
    assert refetches(sites) == 0, (fetched_twice(sites), [err for _, err in errors])


@pytest.mark.timeout(180)
async def test_redis_restarted_empty_mid_crawl_keeps_the_domains_rate(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, private_redis: PrivateRedis
) -> None:
    rate, burst = 5, 2
    site = leaf_site("a.test", 70)
    config = write_config(tmp_path / "d.yaml", [site], rate=rate, burst=burst, prefetch=8)
    settings = replace(settings_for(amqp_url, prefix, sqlite_url, config), redis_url=private_redis.url)
    with serve(site):
        seeded = await asyncio.to_thread(run, "crawler", ["seed", site.url()], settings)
        assert seeded.returncode == 0, seeded.stderr
        workers = [consumer(settings, "--burst") for _ in range(2)]
        # Lost at full speed: both consumers hold tokens reserved up to a second ahead.
        assert await asyncio.to_thread(after_requests([site], 25).wait, 60)
        await asyncio.to_thread(private_redis.restart_empty)
        lost_at = len(site.requests)
        await asyncio.to_thread(finish, *workers, timeout=120)
    times = [t for t, _ in site.requests]  # every request on the wire, robots.txt included
    print(  # the figures docs/faults.md quotes
        f"\nredis lost after {lost_at} of {len(times)} requests: at most {max_in_window(times, 1.0)} "
        f"in a second, {max_in_window(times, 10.0)} in 10 s"
    )
    assert lost_at < len(times) - 2 * rate * 2  # seconds of crawl were left after the loss
    assert max_in_window(times, 1.0) <= rate + burst + 1
    assert max_in_window(times, 10.0) <= 10 * rate + burst + 1


def _kept(database_url: str, domain: str) -> tuple[datetime | None, float | None]:
    """The domain's row in `domain_state`: when it was paused, and until when it is held."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            row = conn.execute(
                sa.text("SELECT paused_at, held_until FROM domain_state WHERE domain = :d"), {"d": domain}
            ).first()
            return (row[0], row[1]) if row is not None else (None, None)
    finally:
        engine.dispose()


@pytest.mark.timeout(180)
async def test_a_sites_pause_and_back_off_survive_redis_restarted_empty(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, private_redis: PrivateRedis
) -> None:
    held = 8.0  # the site's Retry-After, in seconds
    site = leaf_site("a.test", 12)
    site.routes["/p/0"] = lambda n: (
        Reply(429, b"slow down", {"Retry-After": f"{held:g}"}) if n == 0 else page("p0", [])
    )
    config = write_config(tmp_path / "d.yaml", [site], rate=4, burst=1, prefetch=1, retry_delays=[0.2])
    config.write_text(config.read_text().replace("max_retry_after: 5", "max_retry_after: 30"))
    settings = replace(settings_for(amqp_url, prefix, sqlite_url, config), redis_url=private_redis.url)
    with serve(site):
        seeded = await asyncio.to_thread(run, "crawler", ["seed", site.url()], settings)
        assert seeded.returncode == 0, seeded.stderr
        first = consumer(settings, "--burst")  # it waits out the pause, asking Redis nothing meanwhile
        # The back-off is kept in the database; then Redis loses it, well within the pause, and a
        # worker starts (a scale-up): it asks the lost bucket.
        await until(lambda: _kept(sqlite_url, "a.test")[1], within=60, what="the pause kept")
        await asyncio.to_thread(private_redis.restart_empty)
        second = consumer(settings, "--burst")
        await asyncio.to_thread(finish, first, second, timeout=120)
    pushed_back = next(t for t, path in site.requests if path == "/p/0")
    after = [round(t - pushed_back, 2) for t, path in site.requests if t > pushed_back]
    assert after, "nothing was fetched after the 429"
    assert min(after) >= held - 0.5, after  # not one request before the site said


@pytest.mark.timeout(180)
async def test_a_paused_domain_stays_paused_across_redis_restarted_empty(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, private_redis: PrivateRedis
) -> None:
    site = leaf_site("a.test", 40)
    config = write_config(tmp_path / "d.yaml", [site], rate=4, burst=1, prefetch=2)
    settings = replace(settings_for(amqp_url, prefix, sqlite_url, config), redis_url=private_redis.url)
    names = Names(prefix)
    queue = names.domain_queue("a.test")
    with serve(site):
        seeded = await asyncio.to_thread(run, "crawler", ["seed", site.url()], settings)
        assert seeded.returncode == 0, seeded.stderr
        worker = consumer(settings)
        try:
            await until(lambda: len(site.requests) >= 3, within=60, what="the crawl under way")
            paused = await asyncio.to_thread(run, "crawler", ["domains", "pause", "a.test"], settings)
            assert paused.returncode == 0, paused.stderr
            await until(lambda: consumers(amqp_url, queue), lambda n: n == 0, within=30, what="left alone")
            requests = len(site.requests)
            await asyncio.to_thread(private_redis.restart_empty)
            client = Redis.from_url(private_redis.url)
            try:
                # The worker read the pauses again (from the database), or took the queue up again.
                async def looked() -> bool:
                    return bool(
                        await client.exists(names.paused_known_key) or await consumers(amqp_url, queue)
                    )

                await until(looked, within=30, what="the pauses read after the loss")
            finally:
                await client.aclose()
            assert await consumers(amqp_url, queue) == 0
            listed = await asyncio.to_thread(run, "crawler", ["domains", "list"], settings)
            assert "paused" in listed.stdout, listed.stdout
            assert len(site.requests) <= requests + 2  # what was in hand when it paused, at most
        finally:
            ((code, err),) = await asyncio.to_thread(stopped, [worker])
        assert code == 0 and "Traceback" not in err, err


@pytest.mark.timeout(240)
async def test_a_page_parked_for_the_crawlers_own_trouble_after_a_redis_loss_is_not_taken_for_a_duplicate(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str, private_redis: PrivateRedis
) -> None:
    # After a Redis loss, a first delivery of a page is taken once: another copy, queued again by the
    # rebuilt store, is skipped. A page whose first try failed for the crawler's own trouble (here
    # the archive's disk full) is parked with its attempts as they were: its copy back from the tier
    # is no copy queued twice, and must be fetched (it was skipped, and the page lost: bench.chaos).
    disk = tmp_path / "disk"
    disk.mkdir()
    mount = ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)]
    if subprocess.run(mount, check=False).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        a, b = shops(products=3, hosts=["a.test", "b.test"])
        b.routes = {
            "/": page("b home", ["/p/1"]),
            "/p/1": page("b 1", ["/p/2"]),
            "/p/2": page("b 2", [a.url()]),
        }
        slow(b, 0.3)
        config = write_config(tmp_path / "d.yaml", [a, b], retry_delays=[0.5], rate=20, burst=5)
        config.write_text(config.read_text().replace("a.test:\n", "a.test:\n    archive: true\n", 1))
        settings = replace(
            settings_for(amqp_url, prefix, sqlite_url, config, archive_dir=disk), redis_url=private_redis.url
        )
        filler = disk / "filler"
        with contextlib.suppress(OSError), filler.open("wb") as out:
            while True:
                out.write(b"\0" * 4096)
                out.flush()
        with serve(a, b):
            seeded = await asyncio.to_thread(run, "crawler", ["seed", b.url()], settings)
            assert seeded.returncode == 0, seeded.stderr
            worker = consumer(settings, "--trace")
            try:
                # Lost while the worker crawls b.test: its next claim (b/2's link to a.test) finds the
                # store gone and rebuilds it; from then on, first deliveries are taken once.
                await until(lambda: stored(sqlite_url), within=60, what="b.test's home stored")
                await asyncio.to_thread(private_redis.restart_empty)
                await until(lambda: a.requests, within=60, what="a.test asked (its answers not archived)")
                filler.unlink()  # room again: its copy back from the tier is stored
                await until(
                    lambda: a.url() in {r[0] for r in stored(sqlite_url)}, within=60, what="a.test stored"
                )
            finally:
                ((code, err),) = await asyncio.to_thread(stopped, [worker])
        assert code == 0, err
        assert "rebuilt the dedup store" in err and "parked http://a.test" in err, err
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
