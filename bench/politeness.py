"""Politeness read from a server's access log: requests a token bucket per host, and one per IP
address, would not have let through, for the rates given.

The log is bench.web's (`$msec $request_time $host $server_addr $remote_addr $status $request_uri`
a line); a request is timed by its arrival (`$msec - $request_time`), not by when it was logged. A
request is a violation when its host's (or its address's) bucket of `rate` tokens a second, holding
at most `burst`, has no token for it, allowing `slack` seconds for what delays a request between its
token and the wire, and the log's millisecond resolution. A violation takes no token, so each excess request
counts once.

    python -m bench.politeness ACCESS_LOG --host-rate 1 --host-burst 1 [--ip-rate 4 --ip-burst 4]
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# Seconds of leeway per request: a request is sent a little after its token is granted (a new
# connection later than one kept alive, an event loop busy), so two requests granted 1/rate apart
# may arrive a little closer.
SLACK = 0.05


@dataclass(frozen=True, slots=True)
class Rate:
    """A budget: `rate` requests a second, `burst` at once."""

    rate: float
    burst: int


@dataclass(frozen=True, slots=True)
class Request:
    """One line of the log."""

    time: float
    host: str
    address: str
    client: str
    status: int
    path: str


def read_log(path: Path) -> list[Request]:
    """The requests of an access log in bench.web's format, in the order they were logged."""
    out = []
    for line in path.read_text().splitlines():
        parts = line.split(" ", 6)
        if len(parts) == 7:
            arrived = float(parts[0]) - float(parts[1])
            out.append(Request(arrived, parts[2], parts[3], parts[4], int(parts[5]), parts[6]))
    return out


def excess(times: Iterable[float], budget: Rate, slack: float = SLACK) -> int:
    """How many of the requests at `times` a bucket of `budget` would not have let through."""
    tokens, last, over = float(budget.burst), None, 0
    for t in sorted(times):
        if last is not None:
            tokens = min(float(budget.burst), tokens + (t - last) * budget.rate)
        last = t
        if tokens + slack * budget.rate >= 1:
            tokens -= 1
        else:
            over += 1
    return over


@dataclass(slots=True)
class Violations:
    """Requests over budget, per host and per address (only those with any)."""

    requests: int = 0
    hosts: int = 0
    addresses: int = 0
    per_host: dict[str, int] = field(default_factory=dict)
    per_ip: dict[str, int] = field(default_factory=dict)

    @property
    def host_total(self) -> int:
        """Requests over their host's budget."""
        return sum(self.per_host.values())

    @property
    def ip_total(self) -> int:
        """Requests over their address's budget."""
        return sum(self.per_ip.values())


def violations(
    requests: Sequence[Request], *, host: Rate, ip: Rate | None = None, slack: float = SLACK
) -> Violations:
    """Requests over their host's budget and, if `ip` is given, over their address's."""
    by_host: dict[str, list[float]] = defaultdict(list)
    by_ip: dict[str, list[float]] = defaultdict(list)
    for r in requests:
        by_host[r.host].append(r.time)
        by_ip[r.address].append(r.time)
    found = Violations(len(requests), len(by_host), len(by_ip))
    for name, times in by_host.items():
        if n := excess(times, host, slack):
            found.per_host[name] = n
    if ip is not None:
        for address, times in by_ip.items():
            if n := excess(times, ip, slack):
                found.per_ip[address] = n
    return found


def report(
    requests: Sequence[Request], *, host: Rate, ip: Rate | None = None, slack: float = SLACK, top: int = 5
) -> str:
    """A few lines: requests, hosts and addresses, violations per host and per IP, the worst."""
    found = violations(requests, host=host, ip=ip, slack=slack)
    lines = [
        f"{found.requests} requests to {found.hosts} hosts on {found.addresses} addresses",
        f"per-host violations ({host.rate:g}/s, burst {host.burst}, slack {slack:g} s): {found.host_total} "
        f"on {len(found.per_host)} hosts",
    ]
    if ip is not None:
        lines.append(
            f"per-IP violations ({ip.rate:g}/s, burst {ip.burst}, slack {slack:g} s): {found.ip_total} "
            f"on {len(found.per_ip)} addresses"
        )
    worst = sorted([*found.per_host.items(), *found.per_ip.items()], key=lambda kv: -kv[1])[:top]
    lines += [f"  {name}: {n} over" for name, n in worst]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Print the violations an access log shows."""
    parser = argparse.ArgumentParser(prog="python -m bench.politeness", description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path)
    parser.add_argument("--host-rate", type=float, required=True)
    parser.add_argument("--host-burst", type=int, default=1)
    parser.add_argument("--ip-rate", type=float)
    parser.add_argument("--ip-burst", type=int, default=1)
    parser.add_argument("--slack", type=float, default=SLACK, help=f"seconds (default {SLACK})")
    args = parser.parse_args(argv)
    ip = Rate(args.ip_rate, args.ip_burst) if args.ip_rate else None
    print(report(read_log(args.log), host=Rate(args.host_rate, args.host_burst), ip=ip, slack=args.slack))


if __name__ == "__main__":
    main()
