"""`crawler reparse` on an archive of the bench site's pages (~30 KB each, 40 links): pages read again
per second, with one process and with one per core, each run writing every row anew.

python -m bench.reparse [--pages 20000] [--workers 1,2] [--content]

The pages are written to a WARC archive in a temporary directory, their rows to a temporary SQLite
database, as a crawl with `archive: true` leaves them; nothing is fetched. Each run reads every page
from the archive, extracts three fields (EXTRACT), and stores the rows whose reading changed (all of
them: the rows are cleared before each run). Links are not routed (`--no-links`): that is the
frontier's cost, measured by bench.run. With `--content`, every domain has `content: on`: each page's
main content, language and simhash are made too (no near-duplicate index: that is Redis's cost).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sqlite3
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from bench.site import SiteSpec, pages
from crawler.archive import Archive, Exchange
from crawler.config import CrawlConfig
from crawler.reparse.run import Progress, Reparser
from crawler.sink.database import Database
from crawler.sink.reparsed import ReparseStore, Selection
from crawler.sink.sql import PageRecord, Sink, migrate

HEADERS = [("Content-Type", "text/html; charset=utf-8"), ("Content-Encoding", "gzip")]
# A few fields of the kinds a domains.yaml has: a required text, a number by regex, an attribute.
EXTRACT = {
    "title": {"css": "h1", "required": True},
    "price": {"css": ".price", "regex": r"[0-9.]+", "type": "float"},
    "first_link": {"css": "ul.links a", "attr": "href"},
}


async def build(spec: SiteSpec, directory: Path, database_url: str) -> int:
    """The archive and rows of every page of `spec`; how many."""
    migrate(database_url)
    sink_db = Database(database_url)
    sink = Sink(sink_db)
    n = 0
    try:
        async with Archive(directory, max_bytes=1_000_000_000, prefix="bench") as archive:
            batch: list[PageRecord] = []
            for host, page, html in pages(spec):
                url = spec.url(host, page)
                body = html.encode()
                exchange = Exchange(url, 200, HEADERS, body, [("User-Agent", "bench")], datetime.now(UTC))
                archived = await archive.write(exchange)
                batch.append(PageRecord(url, host, 1, 1, url, 200, HEADERS[0][1], archived=archived))
                if len(batch) == 500:
                    await sink.store_many(batch)
                    n, batch = n + len(batch), []
            await sink.store_many(batch)
            n += len(batch)
    finally:
        sink_db.close()
    return n


async def measure(config: CrawlConfig, database_url: str, directory: Path, workers: int) -> Progress:
    """One run over every page with `workers` processes, the rows cleared first."""
    with sqlite3.connect(database_url.removeprefix("sqlite:///")) as conn:
        conn.execute("UPDATE pages SET title = NULL, data = NULL, markdown = NULL, text = NULL, lang = NULL")
    store_db = Database(database_url)
    store = ReparseStore(store_db)
    try:
        reparser = Reparser(config, store, str(directory), Selection(), workers=workers, links=None)
        return await reparser.run(asyncio.Event(), lambda _: None)
    finally:
        store_db.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=20_000, help="pages in all (4 hosts)")
    parser.add_argument("--workers", default="1,2", help="process counts to measure, comma-separated")
    parser.add_argument("--content", action="store_true", help="content: on for every domain")
    args = parser.parse_args()
    spec = SiteSpec(pages=max(args.pages // 4, 1))
    content = {"content": "on"} if args.content else {}
    domains = {h: {"archive": True, "extract": EXTRACT, **content} for h in spec.hosts}
    config = CrawlConfig.model_validate({"domains": domains})
    with tempfile.TemporaryDirectory() as tmp:
        directory, database_url = Path(tmp) / "archive", f"sqlite:///{tmp}/bench.db"
        started = time.monotonic()
        n = asyncio.run(build(spec, directory, database_url))
        size = sum(p.stat().st_size for p in directory.iterdir())
        print(
            f"archive: {n:,} pages, {size / n / 1024:.1f} KiB a page gzipped, "
            f"written in {time.monotonic() - started:.1f}s"
        )
        cores = os.cpu_count() or 1
        for workers in (int(w) for w in args.workers.split(",")):
            done = asyncio.run(measure(config, database_url, directory, workers))
            per_core = done.rate / min(workers, cores)
            print(
                f"--workers {workers}: {done.done:,} pages in {done.seconds:.1f}s, {done.changed:,} changed: "
                f"{done.rate:,.0f} pages/s, {per_core:,.0f} pages/s per core"
            )


if __name__ == "__main__":
    main()
