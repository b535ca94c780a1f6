"""The fleet's shared state: `crawler domains`, `status`, `dead`, `reset` and `frontier migrate`."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict

from rich.console import Console

from crawler.cli.arguments import JSON, JSON_LINES, Command, arg, between, domains, positive
from crawler.cli.running import EXIT_OK, configured, confirmed, usage
from crawler.config import CrawlConfig
from crawler.frontier.client import reset as reset_frontier
from crawler.monitor.status import render, status, watch
from crawler.programs import EXIT_USAGE
from crawler.service import Control
from crawler.service.control import Schema
from crawler.service.inputs import DEAD_LIMIT, DEAD_REASONS
from crawler.service.migration import migrate_frontier
from crawler.settings import Settings
from crawler.worker import wiring


def domains_verb(args: argparse.Namespace) -> int:
    """`crawler domains list|pause|resume`."""
    if args.action != "list" and not args.domain:
        return usage(args, f"`crawler domains {args.action}` needs a domain")

    async def work(settings: Settings, config: CrawlConfig) -> int:
        # A pause is kept in the database too: it may make the schema; a list only reads.
        schema: Schema = "check" if args.action == "list" else "upgrade"
        async with Control.open(settings, config, "crawler domains", schema) as control:
            if args.action == "list":
                for d in await control.domains.listed():
                    paused = "paused" if d.paused else "active"
                    print(f"{d.domain:<24} {paused:<7} depth={d.depth} rate={d.rate:g}/s workers={d.workers}")
                return EXIT_OK
            done = await (
                control.domains.pause(args.domain)
                if args.action == "pause"
                else control.domains.resume(args.domain)
            )
            print(f"{done} {args.action}d")
        return EXIT_OK

    return configured(args, work)


def status_verb(args: argparse.Namespace) -> int:
    """`crawler status`, once or `--watch`ed."""
    if args.watch and args.json:
        return usage(args, "--watch and --json do not go together")

    async def work(settings: Settings, config: CrawlConfig) -> int:
        if args.watch:
            await watch(settings, config, args.interval, Console())
        else:
            data = await status(settings, config)
            print(json.dumps(data, indent=2) if args.json else render(data))
        return EXIT_OK

    return configured(args, work)


def reset(args: argparse.Namespace) -> int:
    """`crawler reset`: seen URLs forgotten, work queues purged."""
    if not confirmed(args, "Forget every seen URL and purge the work queues?"):
        return EXIT_USAGE

    async def work(settings: Settings, config: CrawlConfig) -> int:
        await reset_frontier(settings, config)
        print("seen URLs forgotten, work queues purged")
        return EXIT_OK

    return configured(args, work)


def dead(args: argparse.Namespace) -> int:
    """`crawler dead list|replay|purge`."""
    question = f"Delete dead letters{' of ' + args.domain if args.domain else ''} for good?"
    if args.action == "purge" and not confirmed(args, question):
        return EXIT_USAGE

    async def work(settings: Settings, config: CrawlConfig) -> int:
        async with Control.open(settings, config, "crawler dead", "none") as control:
            if args.action == "list":
                letters = await control.dead.letters(args.domain, args.reason, args.limit)
                for letter in letters:
                    if args.json:
                        print(json.dumps(asdict(letter)))
                    else:
                        print(f"{letter.reason:<10} {letter.attempts:>2} {letter.url}  {letter.error}")
                if not args.json:
                    print(f"{len(letters)} dead letters", file=sys.stderr)
            elif args.action == "replay":
                print(f"{await control.dead.replay(args.domain, args.reason)} dead letters replayed")
            else:
                print(f"{await control.dead.purge(args.domain, args.reason)} dead letters purged")
        return EXIT_OK

    return configured(args, work)


def frontier(args: argparse.Namespace) -> int:
    """`crawler frontier migrate`: the queues re-made as the configuration's queue type."""

    async def work(settings: Settings, config: CrawlConfig) -> int:
        moved = await migrate_frontier(
            settings, config, wiring.check_domains(config, args.domains, queued=True)
        )
        for queue, count in moved.queues.items():
            print(f"{queue}: re-made as {config.frontier.queue_type}, {count} message(s) moved")
        print(f"{len(moved.unchanged)} queue(s) already {config.frontier.queue_type}")
        return EXIT_OK

    return configured(args, work)


DOMAINS = Command(
    "domains",
    "domains: list them, pause or resume one fleet-wide",
    (
        arg("action", choices=["list", "pause", "resume"]),
        arg("domain", nargs="?", help="the domain (pause, resume)"),
    ),
    domains_verb,
)
STATUS = Command(
    "status",
    "queue depths and stored pages per domain",
    (
        JSON,
        arg("--watch", action="store_true", help="refresh the status until interrupted"),
        arg("--interval", type=positive, default=2.0, help="seconds between refreshes"),
    ),
    status_verb,
)
RESET = Command(
    "reset",
    "forget seen URLs and purge the work queues",
    (arg("--yes", action="store_true", help="do not ask for confirmation"),),
    reset,
)
DEAD = Command(
    "dead",
    "the dead queue: list, replay or purge what was set aside",
    (
        arg("action", choices=["list", "replay", "purge"]),
        arg("--domain", help="only this domain (and its subdomains)"),
        arg("--reason", choices=DEAD_REASONS, help="only this reason"),
        arg("--limit", type=between(*DEAD_LIMIT), help=f"list at most this many (up to {DEAD_LIMIT[1]})"),
        JSON_LINES,
        arg("--yes", action="store_true", help="purge without asking"),
    ),
    dead,
)
FRONTIER = Command(
    "frontier",
    "migrate: re-make the queues as domains.yaml's frontier.queue_type says, moving messages",
    (
        arg("action", choices=["migrate"]),
        arg(
            "--domains",
            type=domains,
            help="only these domains' queues, comma-separated (and the shared ones)",
        ),
    ),
    frontier,
)
