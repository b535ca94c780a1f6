"""A dnsmasq of the test's own: the names of tests/support/sites.py and a few more, on 127.0.0.53."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import dnsmasq
from bench.dnsmasq import NameServer

ADDRESS = "127.0.0.53"
NAMES = {
    "a.test": "127.0.0.21",
    "b.test": "127.0.0.22",
    "www.b.test": "127.0.0.22",
    "six.test": "::1",
    "evil.test": "169.254.169.254",
    "inside.test": "10.0.0.1",
}
TTL = 600  # what dnsmasq's answers from the hosts file say


@pytest.fixture
def nameserver(tmp_path: Path) -> Iterator[NameServer]:
    """dnsmasq answering NAMES (TTL seconds), NXDOMAIN for other .test names; names under
    dead.test are forwarded to a port nothing answers (they time out), names under refused.test to
    a second dnsmasq that refuses them."""
    hosts = dnsmasq.write_hosts(tmp_path / "hosts", NAMES)
    empty = dnsmasq.write_hosts(tmp_path / "none", {})
    dead = f"{ADDRESS}#{dnsmasq.free_udp_port(ADDRESS)}"
    with dnsmasq.serve(
        tmp_path / "refuser", empty, address=ADDRESS, local="up", log_queries=False
    ) as refuser:
        forward = {"dead.test": dead, "refused.test": f"{ADDRESS}#{refuser.port}"}
        with dnsmasq.serve(tmp_path / "dnsmasq", hosts, address=ADDRESS, ttl=TTL, forward=forward) as server:
            yield server
