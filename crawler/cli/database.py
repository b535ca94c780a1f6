"""What is kept in the database, read or kept in shape: `crawler export`, `history prune`,
`sitemaps` and `db upgrade`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crawler.cli.arguments import SINCE, Command, arg, each_domain, one_of
from crawler.cli.running import EXIT_INTERRUPTED, EXIT_OK, configured, failed, run, settings_and_config
from crawler.config import CrawlConfig
from crawler.errors import CrawlerError
from crawler.programs import closed_pipe
from crawler.service import Control
from crawler.settings import Settings
from crawler.sink.database import Database, opened
from crawler.sink.export import FORMATS, Query, export, parse_since
from crawler.sink.export_object import export_to_object
from crawler.sink.prune import Pruner
from crawler.sink.sitemaps import SitemapRead, SitemapStore
from crawler.sink.sql import check_schema, migrate
from crawler.worker import wiring


def export_verb(args: argparse.Namespace) -> int:
    """`crawler export`."""
    # Reads the database alone: no domains.yaml and no broker are needed to take the data out.
    try:
        since = parse_since(args.since) if args.since else None
        changed = parse_since(args.changed_since, "--changed-since") if args.changed_since else None
        query = Query(args.domain, since, args.history, changed, args.dataset, args.invalid)
        settings = Settings.from_env()
        with Database(settings.database_url) as database:
            check_schema(database)
            if args.to:
                count = export_to_object(settings, args.format, args.to, query, database)
            else:
                count = export(database, args.format, args.out, query)
    except CrawlerError as exc:
        return failed(exc)
    except BrokenPipeError:
        return closed_pipe()
    except KeyboardInterrupt:
        print("crawler export: interrupted; nothing was left under the key", file=sys.stderr)
        return EXIT_INTERRUPTED
    if args.out is not None or args.to:
        what = "versions" if args.history else "pages"
        print(f"{count} {what} written to {args.out or args.to}", file=sys.stderr)
    return EXIT_OK


def prune(args: argparse.Namespace) -> int:
    """`crawler history prune`."""
    # The database and domains.yaml alone: a cron job needs no broker.
    try:
        settings, config = settings_and_config(args)
        domains = wiring.check_domains(config, args.prune_domains)
        with Database(settings.database_url) as database:
            check_schema(database)
            pruner = Pruner(database)
            for domain in domains:
                history = config.rules[domain].history
                if history is None:
                    print(f"{domain:<24} history off: its versions left alone")
                    continue
                deleted = pruner.prune(domain, history, args.dry_run)
                done = "would be deleted (dry run)" if args.dry_run else "deleted"
                print(f"{domain:<24} {deleted:>10} versions {done}")
    except CrawlerError as exc:
        return failed(exc)
    except BrokenPipeError:
        return closed_pipe()
    return EXIT_OK


def sitemaps(args: argparse.Namespace) -> int:
    """`crawler sitemaps`: a domain's sitemaps as last read, after a round of reading them (`--read`)."""
    if args.read:
        return configured(args, lambda settings, config: _read(args, settings, config))
    # The database and domains.yaml alone: what the workers' last readings found.
    try:
        settings, config = settings_and_config(args)
    except CrawlerError as exc:
        return failed(exc)
    return _show(args, settings, config)


async def _read(args: argparse.Namespace, settings: Settings, config: CrawlConfig) -> int:
    with Database(settings.database_url) as database:
        async with Control.open(settings, config, "crawler sitemaps", "check", database) as control:
            began = await control.recrawls.read_sitemaps(args.domain)
        print(f"{args.domain}: a round of reading its sitemaps began at {began} origin(s)", file=sys.stderr)
        return _show(args, settings, config, database)


def _show(
    args: argparse.Namespace, settings: Settings, config: CrawlConfig, database: Database | None = None
) -> int:
    try:
        [domain] = wiring.check_domains(config, [args.domain])
        with opened(database or settings.database_url) as db:
            check_schema(db)
            read = SitemapStore(db).files(domain)
    except CrawlerError as exc:
        return failed(exc)
    try:
        if args.json:
            for f in read:
                print(json.dumps(_sitemap_json(f)))
        else:
            print(_sitemap_table(domain, read, config.rules[domain].sitemaps))
    except BrokenPipeError:
        return closed_pipe()
    return EXIT_OK


def _sitemap_json(f: SitemapRead) -> dict[str, Any]:
    return {
        "url": f.url,
        "depth": f.depth,
        "outcome": f.outcome,
        "kind": f.kind,
        "status_code": f.status_code,
        "read_at": f.read_at.isoformat(),
        "urls": dict(f.counts),
        "note": f.note,
    }


def _sitemap_table(domain: str, read: Sequence[SitemapRead], setting: object) -> str:
    if setting is False:
        head = f"{domain}: sitemaps off (`sitemaps: false` in domains.yaml)"
    else:
        head = f"{domain}: no sitemap read yet" if not read else f"{domain}: {len(read)} sitemap file(s)"
    total: Counter[str] = Counter()
    lines = []
    for f in read:
        total.update(f.counts)
        counts = ", ".join(f"{n} {k}" for k, n in sorted(f.counts.items())) or "no URLs"
        note = f" ({f.note})" if f.note else ""
        when = f.read_at.strftime("%Y-%m-%d %H:%M:%S")
        lines.append(f"  {f.outcome:<12} {f.kind or '-':<12} {when}  {f.url}\n    {counts}{note}")
    if total:
        head += ": " + ", ".join(f"{n} {k}" for k, n in sorted(total.items()))
    return "\n".join([head, *lines])


def db(args: argparse.Namespace) -> int:
    """`crawler db upgrade`: the schema alone, no domains.yaml needed."""

    async def upgrade() -> int:
        await asyncio.to_thread(migrate, Settings.from_env().database_url)
        print("database schema is up to date")
        return EXIT_OK

    return run(upgrade)


EXPORT = Command(
    "export",
    "the pages table as JSON lines, CSV or Parquet, streamed",
    (
        arg("--format", choices=FORMATS, default="jsonl", help="jsonl (default), csv or parquet"),
        arg("--domain", help="only this configured domain's pages"),
        SINCE,
        one_of(
            arg("--history", action="store_true", help="every version of the pages, one row each"),
            arg("--changed-since", metavar="TIME", help="only pages with a version fetched after this time"),
        ),
        arg(
            "--dataset",
            action="store_true",
            help="pages with content, one JSON record each: url, title, lang, markdown, fetched_at, digest",
        ),
        arg(
            "--invalid",
            action="store_true",
            help="only pages that failed an expectation, each with its `expectations` (name and reason)",
        ),
        one_of(
            arg("--out", type=Path, help="file to write (default: stdout; parquet needs a file)"),
            arg(
                "--to",
                metavar="s3://BUCKET/KEY",
                help="an object to write, as one multipart upload (none if cut short)",
            ),
        ),
    ),
    export_verb,
)
HISTORY = Command(
    "history",
    "page versions: delete those each domain's `history` no longer keeps",
    (
        arg("action", choices=["prune"]),
        each_domain("prune_domains", "only this domain (again for more; default: every configured domain)"),
        arg("--dry-run", action="store_true", help="count what would be deleted, delete nothing"),
    ),
    prune,
)
SITEMAPS = Command(
    "sitemaps",
    "a domain's sitemaps as last read: files, URLs, what was dropped and why",
    (
        arg("domain"),
        arg("--read", action="store_true", help="first begin a round of reading them (the workers read it)"),
        arg("--json", action="store_true", help="print JSON lines, one per file"),
    ),
    sitemaps,
)
DB = Command("db", "database schema", (arg("action", choices=["upgrade"]),), db)
