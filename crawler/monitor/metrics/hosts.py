"""The host layout's discovered hosts in aggregate: never a series per host."""

from __future__ import annotations

from collections.abc import Callable

from crawler.hosts.views import HostCounts
from crawler.monitor.metrics.declared import Declarations

HOST_STATES = ("known", "active", "waiting", "parked")


class HostMetrics:
    """Discovered hosts by state and the shard queues' ready messages; a discovered
    host's `domain` label in every other metric is DISCOVERED_LABEL once `fold_domains` says which."""

    def __init__(self, declared: Declarations) -> None:
        self._domains = declared.domains
        self.discovered_hosts = declared.gauge("crawler_discovered_hosts")
        self.host_shards_ready = declared.gauge("crawler_host_shards_messages_ready")

    def fold_domains(self, discovered: Callable[[str], bool], listed: Callable[[str], bool]) -> None:
        """Label every domain `discovered` says is a discovered host as DISCOVERED_LABEL, and every
        one `listed` says the host layout serves as LISTED_LABEL, from now on."""
        self._domains.discovered = discovered
        self._domains.listed = listed

    def observe_hosts(self, counts: HostCounts) -> None:
        """The fleet's discovered hosts as last read (crawler/hosts/views.py)."""
        for state in HOST_STATES:
            self.discovered_hosts.labels(state).set(getattr(counts, state))

    def observe_host_shards(self, ready: int) -> None:
        """The shard queues' ready messages, summed over a whole sample."""
        self.host_shards_ready.set(ready)
