"""How a consumer paces its own machinery: production defaults, smaller values in tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Tuning:
    """A consumer's internal pacing and limits (not the crawl's politeness: that is domains.yaml)."""

    drain_poll: float = 0.25  # seconds between checks for an empty frontier in burst mode
    config_poll: float = 1.0  # seconds between checks of domains.yaml for an edit
    short_retry_wait: float = 0.2  # seconds before the first retry of a failed store or publish
    # With hundreds of domains, one queue after another is thousands of round trips in a row, each
    # waiting behind the deliveries already being processed: set up (and take down) this many at once.
    at_once: int = 64
    # Messages one consumer holds unacked, all queues together: far beyond what its fetch slots can
    # work on, more only cost broker CPU and pages/s (1,000 queues x 16 against x 4 in
    # bench/README.md). Each queue's prefetch is lowered to its share when there are that many queues.
    max_prefetched: int = 4096
    # Burst mode: a fetch service down this long ends the burst (exit 2, its messages left queued);
    # a worker that runs on waits for it however long it takes.
    outage_limit: float = 120.0
    probes: int = 8  # channels asking queue depths at once when burst mode checks for an empty frontier
    # RabbitMQ closes the whole connection when a client opens more channels than it negotiated (2047
    # by default), and a robust connection restores its channels one by one after a reconnect: each
    # connection carries at most this many domain channels, more domains get more connections.
    channels_per_connection: int = 256
    channels_kept_free: int = 8
    # Processes of the content pool (main content, documents), started only when a domain has
    # `content:` on: its CPU work is what they add, so one a core spare beside the worker's own.
    content_processes: int = 2  # under channel_max, for the probes and the queue sampler


DEFAULT_TUNING = Tuning()
