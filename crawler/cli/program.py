"""`crawler`: its commands, each a row of data (crawler/cli/arguments.py), and what runs them."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from crawler import stopping
from crawler.cli import crawling, crawls, database, fleet, reparse
from crawler.cli.arguments import Command, add, common
from crawler.monitor import logs
from crawler.programs import Parser

COMMANDS: tuple[Command, ...] = (
    crawling.SEED,
    crawling.CRAWL,
    crawling.RECRAWL,
    crawls.CRAWLS,
    crawls.QUALITY,
    fleet.DOMAINS,
    fleet.STATUS,
    fleet.RESET,
    fleet.DEAD,
    database.EXPORT,
    database.HISTORY,
    database.SITEMAPS,
    reparse.REPARSE,
    fleet.FRONTIER,
    database.DB,
)
_BY_NAME = {command.name: command for command in COMMANDS}


def build_parser() -> argparse.ArgumentParser:
    """`crawler`'s arguments, every subcommand's included."""
    parser = Parser(prog="crawler", description="A distributed web crawler on RabbitMQ.", version=True)
    add(parser, common())
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        add(
            sub.add_parser(command.name, help=command.help),
            (*command.arguments, *common(consumes=command.consumes, sub=True)),
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler`."""
    args = build_parser().parse_args(argv)
    command = _BY_NAME[args.command]
    if not command.consumes:  # a one-shot command: SIGTERM ends it as it always did
        stopping.let_go()
    logs.setup(args.verbose, args.log_format, trace=getattr(args, "trace", False))
    # What argparse cannot see alone each command checks before anything connects.
    return command.run(args)
