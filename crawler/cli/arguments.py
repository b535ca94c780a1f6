"""The command line as data: a command's table of arguments, the option groups several commands
share, and the types that check the values given."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from crawler.monitor import logs
from crawler.monitor.endpoint import METRICS_ADDR
from crawler.names import HEARTBEAT_TTL

MAX_PREFETCH = 65_535  # AMQP's prefetch count is a 16-bit number
MAX_GRACE = 86_400.0  # seconds: a drain longer than a day is a typo


@dataclass(frozen=True)
class Arg:
    """One argument: its flags (or its name) and what argparse is told of it."""

    flags: tuple[str, ...]
    options: Mapping[str, Any]


@dataclass(frozen=True)
class OneOf:
    """Arguments of which at most one may be given."""

    arguments: tuple[Arg, ...]


Arguments = tuple[Arg | OneOf, ...]


def arg(*flags: str, **options: Any) -> Arg:
    """An argument as `add_argument` takes it."""
    return Arg(flags, options)


def one_of(*arguments: Arg) -> OneOf:
    """A mutually exclusive group."""
    return OneOf(arguments)


@dataclass(frozen=True)
class Command:
    """A `crawler` command: its name and help, its arguments, and what runs it to an exit status."""

    name: str
    help: str
    arguments: Arguments
    run: Callable[[argparse.Namespace], int]
    consumes: bool = False  # it consumes the frontier: --trace, and SIGTERM drains it


def each_domain(dest: str, help: str) -> Arg:
    """`--domain D`, again for more, into `dest`."""
    return arg("--domain", action="append", dest=dest, metavar="DOMAIN", help=help)


def add(parser: argparse.ArgumentParser, arguments: Iterable[Arg | OneOf]) -> None:
    """Give `parser` the `arguments` of a table, in its order."""
    for argument in arguments:
        if isinstance(argument, OneOf):
            group = parser.add_mutually_exclusive_group()
            for each in argument.arguments:
                group.add_argument(*each.flags, **each.options)
        else:
            parser.add_argument(*argument.flags, **argument.options)


def common(*, consumes: bool = False, sub: bool = False) -> Arguments:
    """The options every program and command takes. A command's (`sub`) have no default of their
    own: given before the command (`crawler --config F status`) or after it, they count alike."""
    default: dict[str, Any] = {"default": argparse.SUPPRESS} if sub else {}
    verbose = "log every page's outcome, and connections" if consumes else "log what it connects to and does"
    trace = arg(
        "--trace",
        action="store_true",
        help="log each URL's way: routed, delivered, acked, parked (a lot)",
    )
    return (
        arg(
            "--config",
            help="domains.yaml to use (default: $CRAWLER_CONFIG or config/domains.yaml)",
            **default,
        ),
        arg("-v", "--verbose", action="store_true", help=verbose, **default),
        *((trace,) if consumes else ()),
        arg(
            "--log-format",
            choices=logs.FORMATS,
            help="text, or json: one object per line",
            **(default or {"default": "text"}),
        ),
    )


def port(value: str) -> int:
    """An argparse type: a TCP port."""
    number = int(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-65535)")
    return number


def positive(value: str) -> float:
    """An argparse type: a positive number of seconds."""
    number = _number(value)
    if not number > 0:
        raise argparse.ArgumentTypeError(f"{value} is not a positive number of seconds")
    return number


def seconds(value: str) -> float:
    """An argparse type: seconds, up to a day."""
    number = _number(value)
    if not 0 <= number <= MAX_GRACE:
        raise argparse.ArgumentTypeError(f"{value} is not a number of seconds from 0 to {MAX_GRACE:g}")
    return number


def _number(value: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise argparse.ArgumentTypeError(f"{value!r} is not a finite number")
    return number


def between(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`."""

    def count(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
        if not low <= number <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return number

    return count


prefetch = between(1, MAX_PREFETCH)


def domains(value: str) -> list[str]:
    """An argparse type: comma-separated domains."""
    return [d for d in value.split(",") if d.strip()]


def workers(text: str) -> int:
    """An argparse type: a number of processes."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 256:
        raise argparse.ArgumentTypeError(f"{text!r}: a number of processes from 1 to 256")
    return n


MONITORING: Arguments = (
    arg("--metrics-port", type=port, help="serve Prometheus metrics on this port"),
    arg(
        "--metrics-addr",
        default=METRICS_ADDR,
        help=f"address to serve metrics on (default {METRICS_ADDR}: this machine only; 0.0.0.0 for all)",
    ),
    # For tests: a short TTL lets a killed worker show as gone quickly.
    arg("--heartbeat-ttl", type=positive, default=HEARTBEAT_TTL, help=argparse.SUPPRESS),
)

# A new crawl's options, besides its seed URLs.
CRAWL_OPTIONS: Arguments = (
    arg("--label", help="a name for the crawl, for people"),
    arg("--max-depth", type=int, help="this crawl's link depth limit (below domains.yaml's)"),
    arg("--max-pages", type=int, help="this crawl's page budget, every domain together"),
    arg("--only", type=domains, help="comma-separated domains this crawl may visit"),
)
PREFETCH = arg("--prefetch", type=prefetch, help="per-queue prefetch (default: each domain's)")
SINCE = arg("--since", help="only pages fetched at or after this ISO 8601 time (UTC if no offset)")
JSON_LINES = arg("--json", action="store_true", help="list as JSON lines")
JSON = arg("--json", action="store_true", help="print JSON")
