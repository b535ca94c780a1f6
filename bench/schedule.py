"""The scheduler's publish rate from PostgreSQL holding many stored pages, and the due query's plan.

python -m bench.schedule [--rows 1000000] [--publish 200000] [--domains 4]

Fills a fresh PostgreSQL database with `--rows` stored pages, all due, over `--domains` domains, then
lets one scheduler claim and publish `--publish` of them into a fresh vhost (each domain's rate high
enough that its room is not the limit), and reports URLs published per second. The plan of one claim
is printed: it must read the (domain, next_fetch_at) index, not the table.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Sequence
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import yaml

from bench import services
from crawler import connections
from crawler.config import load_config
from crawler.scheduler.running import scheduling
from crawler.scheduler.scheduler import Timing
from crawler.settings import Settings
from crawler.sink.sql import migrate


def _fill(database_url: str, rows: int, domains: Sequence[str]) -> float:
    """`rows` stored pages, due a day ago, spread over `domains`, by COPY; seconds it took."""
    started = time.monotonic()
    due = datetime.now(UTC) - timedelta(days=1)
    with psycopg.connect(database_url) as conn, conn.cursor() as cur:
        columns = (
            "url, domain, depth, attempts, status_code, fetched_at, fetch_interval, next_fetch_at, "
            "etag, signature, credits, rendered, gone"
        )
        with cur.copy(f"COPY pages ({columns}) FROM STDIN") as copy:
            for i in range(rows):
                domain = domains[i % len(domains)]
                copy.write_row(
                    (f"http://{domain}/p/{i}.html", domain, 2, 1, 200, due, 86_400.0, due,
                     f'"{i:x}"', f"{i:032x}", 0.0, False, 0)
                )  # fmt: skip
        cur.execute("ANALYZE pages")
    return time.monotonic() - started


def _plan(database_url: str, domain: str) -> str:
    """EXPLAIN of one claim of 1,000 due pages of `domain` (run and rolled back)."""
    claim = (
        "EXPLAIN (ANALYZE, COSTS OFF) UPDATE pages SET next_fetch_at = now() + interval '30 minutes' "
        "WHERE id IN (SELECT pages.id FROM pages WHERE pages.domain = %s AND pages.next_fetch_at <= now() "
        "AND (pages.crawl_id IS NULL OR pages.crawl_id IN (SELECT crawls.id FROM crawls "
        "WHERE crawls.state != 'cancelled')) ORDER BY pages.next_fetch_at LIMIT 1000 FOR UPDATE SKIP LOCKED) "
        "RETURNING url"
    )
    with psycopg.connect(database_url) as conn, conn.cursor() as cur:
        cur.execute(claim, (domain,))
        plan = "\n".join(row[0] for row in cur.fetchall())
        conn.rollback()
    return plan


async def _publish(settings: Settings, target: int) -> tuple[int, float]:
    """Publish passes until `target` are published; how many, and the seconds."""
    config = load_config(settings.config_path)
    published = 0
    async with (
        connections.broker(settings.amqp_url, "bench scheduler") as connection,
        scheduling(settings, lambda: config, connection, timing=Timing(ahead=3600)) as scheduler,
    ):
        started = time.monotonic()
        while published < target:
            done = await scheduler.publish_due()
            if not done:
                break
            published += sum(done.values())
        return published, time.monotonic() - started


def main(argv: Sequence[str] | None = None) -> None:
    """Fill, publish, report."""
    parser = argparse.ArgumentParser(prog="python -m bench.schedule", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="stored pages (default %(default)s)")
    parser.add_argument("--publish", type=int, default=200_000, help="pages to publish (default %(default)s)")
    parser.add_argument("--domains", type=int, default=4, help="domains they belong to (default 4)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/crawler-schedule"), help="config file")
    args = parser.parse_args(argv)
    domains = [f"d{i}.test" for i in range(args.domains)]
    args.work.mkdir(parents=True, exist_ok=True)
    config = args.work / "domains.yaml"
    # Rate high enough that a domain's room (rate x ahead) is not what limits a pass.
    recrawled = {d: {"rate": 100_000, "recrawl": {"every": "1d"}} for d in domains}
    config.write_text(yaml.safe_dump({"domains": recrawled}))
    with ExitStack() as stack:
        database = stack.enter_context(services.database())
        amqp = stack.enter_context(services.vhost())
        prefix = stack.enter_context(services.key_prefix("schedulebench"))
        migrate(database)
        filled = _fill(database, args.rows, domains)
        print(f"{args.rows} due pages over {len(domains)} domains stored in {filled:.1f}s")
        print("plan of one claim:\n" + _plan(database, domains[0]))
        settings = Settings(amqp_url=amqp, database_url=database, config_path=str(config), prefix=prefix)
        published, seconds = asyncio.run(_publish(settings, args.publish))
        rate = published / seconds if seconds else 0.0
        print(f"published {published} refreshes in {seconds:.1f}s: {rate:.0f} URLs/s (aim >= 5,000)")


if __name__ == "__main__":
    main()
