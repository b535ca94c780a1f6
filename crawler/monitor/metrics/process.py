"""A worker's own life: when it started, its last heartbeat, and how long the broker blocked it."""

from __future__ import annotations

from crawler.connections import Blocking
from crawler.monitor.metrics.declared import Declarations


class ProcessMetrics:
    """This worker's start time, heartbeat and blocked publishing."""

    def __init__(self, declared: Declarations) -> None:
        self.heartbeat = declared.gauge("crawler_heartbeat_timestamp_seconds")
        self.started = declared.gauge("crawler_worker_start_time_seconds")
        self.started.set_to_current_time()
        self.broker_blocked = declared.gauge("crawler_broker_blocked")
        self.broker_blocked_seconds = declared.gauge("crawler_broker_blocked_seconds")

    def follow_blocking(self, blocking: Blocking) -> None:
        """Report the publishing connection's blocked state, read when scraped."""
        self.broker_blocked.set_function(lambda: float(blocking.blocked))
        self.broker_blocked_seconds.set_function(blocking.seconds)

    def beat(self, when: float) -> None:
        """The worker's heartbeat at Unix time `when`."""
        self.heartbeat.set(when)
