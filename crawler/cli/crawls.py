"""`crawler crawls` (list, show, cancel, delete) and `crawler quality`: crawls as they are kept."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from pydantic_core import to_jsonable_python

from crawler.cli.arguments import JSON, JSON_LINES, Command, arg
from crawler.cli.running import EXIT_OK, configured, usage
from crawler.config import CrawlConfig
from crawler.quality.report import render as render_quality
from crawler.service import Control, CrawlView
from crawler.settings import Settings
from crawler.sink.crawls import STATES

_CRAWL_KINDS = ("ok", "failed", "retrying", "dead", "skipped", "pending")
# A crawl's columns: (title, width); counts are right-aligned, the label takes the rest of the line.
_CRAWL_COLUMNS = (("id", 16), ("state", 11), ("started", 20), ("ended", 20))


def _crawl_line(view: CrawlView) -> str:
    def when(moment: datetime | None) -> str:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment else "-"

    cells = (view.id, view.state, when(view.started), when(view.finished))
    left = "  ".join(f"{cell:<{width}}" for cell, (_, width) in zip(cells, _CRAWL_COLUMNS, strict=True))
    counts = " ".join(f"{sum(c.get(k, 0) for c in view.counts.values()):>{len(k)}}" for k in _CRAWL_KINDS)
    return f"{left}  {counts}  {view.label or ''}".rstrip()


def _crawl_header() -> str:
    left = "  ".join(f"{title:<{width}}" for title, width in _CRAWL_COLUMNS)
    return f"{left}  {' '.join(_CRAWL_KINDS)}  label"


def _json(value: Any, indent: int | None = None) -> str:
    """JSON as the HTTP API writes it (times in ISO 8601 with Z), so both read the same."""
    return json.dumps(to_jsonable_python(value), indent=indent)


def crawls(args: argparse.Namespace) -> int:
    """`crawler crawls list|show|cancel|delete`."""
    if args.action != "list" and not args.id:
        return usage(args, f"`crawler crawls {args.action}` needs a crawl id")

    async def work(settings: Settings, config: CrawlConfig) -> int:
        async with Control.open(settings, config, "crawler crawls", "check") as control:
            if args.action == "list":
                views = await control.crawls.listed(args.state)
                if not args.json:
                    print(_crawl_header())
                for view in views:
                    print(_json(asdict(view)) if args.json else _crawl_line(view))
            elif args.action == "show":
                print(_json(asdict(await control.crawls.get(args.id)), indent=2))
            elif args.action == "cancel":
                print(_crawl_line(await control.crawls.cancel(args.id)))
            else:
                await control.crawls.delete(args.id, purge=args.purge)
                print(f"crawl {args.id} deleted{' with its pages' if args.purge else ''}")
        return EXIT_OK

    return configured(args, work)


def quality(args: argparse.Namespace) -> int:
    """`crawler quality`: a crawl's field coverage and failed expectations."""

    async def work(settings: Settings, config: CrawlConfig) -> int:
        async with Control.open(settings, config, "crawler quality", "check") as control:
            report = await control.crawls.quality(args.crawl, args.domain)
        print(_json(report.to_json(), indent=2) if args.json else render_quality(report))
        return EXIT_OK

    return configured(args, work)


CRAWLS = Command(
    "crawls",
    "crawls: list, show, cancel or delete one",
    (
        arg("action", choices=["list", "show", "cancel", "delete"]),
        arg("id", nargs="?", help="the crawl's id (show, cancel, delete)"),
        arg("--state", choices=STATES, help="list only these"),
        arg("--purge", action="store_true", help="delete: its stored pages too"),
        JSON_LINES,
    ),
    crawls,
)
QUALITY = Command(
    "quality",
    "a crawl's field coverage and failed expectations, beside the last finished crawl",
    (
        arg("--crawl", metavar="ID", help="this crawl (default: the newest)"),
        arg("--domain", help="only this domain"),
        JSON,
    ),
    quality,
)
