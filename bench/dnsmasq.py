"""Debian's dnsmasq as a name server of a test's or the bench's own, on a loopback address and port.

It answers the names of a hosts-format file (`IP name` a line), NXDOMAIN for every other name under
`local` (e.g. `test`), and forwards names under each `forward` domain to the address given (a dead one
makes a lookup time out; one that refuses makes it fail).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import dns.message
import dns.query
import dns.rcode

START_TIMEOUT = 10.0


def binary() -> str:
    """Path of dnsmasq (Debian's dnsmasq-base, which scripts/services installs)."""
    found = shutil.which("dnsmasq") or ("/usr/sbin/dnsmasq" if Path("/usr/sbin/dnsmasq").exists() else None)
    if found is None:
        raise SystemExit(
            "dnsmasq is not installed: run `bash scripts/services --tests` (or apt-get install dnsmasq-base)"
        )
    return found


def free_udp_port(address: str) -> int:
    """A UDP port free on `address`."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
    return port


def write_hosts(path: Path, hosts: Mapping[str, str]) -> Path:
    """Write a hosts-format file mapping each name to its address."""
    path.write_text("".join(f"{ip} {name}\n" for name, ip in hosts.items()))
    return path


@dataclass(frozen=True, slots=True)
class NameServer:
    """A running dnsmasq: where it answers, its process, its query log."""

    address: str
    port: int
    pid: int
    log: Path

    @property
    def spelled(self) -> str:
        """As `dns: nameservers:` takes it: `127.0.0.53:5354`."""
        return f"{self.address}:{self.port}"

    def queries(self, name: str, kind: str = "A") -> int:
        """How many queries of `kind` for `name` it was asked (from its log)."""
        needle = f"query[{kind}] {name} from"
        return sum(needle in line for line in self.log.read_text().splitlines())


def _answers(address: str, port: int, name: str) -> bool:
    try:
        reply = dns.query.udp(dns.message.make_query(name, "A"), address, port=port, timeout=0.2)
    except (OSError, dns.exception.Timeout):
        return False
    return reply.rcode() in (dns.rcode.NOERROR, dns.rcode.NXDOMAIN)


@contextmanager
def serve(
    state: Path,
    hosts_file: Path,
    *,
    address: str = "127.0.0.53",
    port: int | None = None,
    local: str = "test",
    ttl: int = 0,
    forward: Mapping[str, str] | None = None,
    cache_size: int = 10_000,
    log_queries: bool = True,
) -> Iterator[NameServer]:
    """Run dnsmasq until the block ends; `ttl` is the TTL its answers from `hosts_file` carry."""
    state.mkdir(parents=True, exist_ok=True)
    port = port or free_udp_port(address)
    log = state / "dnsmasq.log"
    argv = [
        binary(),
        "--keep-in-foreground",
        "--no-resolv",
        "--no-hosts",
        "--no-poll",
        f"--port={port}",
        f"--listen-address={address}",
        "--bind-interfaces",
        f"--addn-hosts={hosts_file}",
        f"--local=/{local}/",
        f"--local-ttl={ttl}",
        f"--cache-size={cache_size}",
        f"--pid-file={state / 'dnsmasq.pid'}",
        f"--log-facility={log}",
    ]
    if log_queries:
        argv.append("--log-queries")
    if os.geteuid() == 0:
        argv.append("--user=root")  # else it drops to `nobody`, who may not read a private temp directory
    for domain, upstream in (forward or {}).items():
        argv.append(f"--server=/{domain}/{upstream}")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while not _answers(address, port, f"up.{local}"):
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else ""
                raise RuntimeError(f"dnsmasq did not start on {address}:{port}: {err.strip()}")
        yield NameServer(address, port, proc.pid, log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()
