"""A worker's deliveries: those in flight, how soon each done one is acked, and the queues it samples."""

from __future__ import annotations

from crawler.frontier.settling import AckAfter
from crawler.monitor.metrics.declared import Declarations


class DeliveryMetrics:
    """Messages in flight, ack delays and frames, and the sampled queue depths."""

    def __init__(self, declared: Declarations) -> None:
        self.ack_delay = declared.histogram("crawler_ack_delay_seconds")
        self.ack_frames = declared.counter("crawler_ack_frames")
        self.inflight = declared.gauge("crawler_inflight_messages")
        self.queue_ready = declared.gauge("crawler_queue_messages_ready")
        self.queue_consumers = declared.gauge("crawler_queue_consumers")
        self.frontier_ready = declared.gauge("crawler_frontier_messages_ready")

    def message_started(self, domain: str) -> None:
        """A delivery is being processed."""
        self.inflight.labels(domain).inc()

    def message_done(self, domain: str) -> None:
        """A delivery was acked, retried, set aside or returned."""
        self.inflight.labels(domain).dec()

    def observe_ack_delay(self, after: AckAfter, seconds: float) -> None:
        """The time from a delivery's work being done to its ack being written."""
        self.ack_delay.labels(after).observe(seconds)

    def observe_ack_frames(self, single: int, multiple: int) -> None:
        """Ack frames written for deliveries done: `single` alone, `multiple` each covering a run."""
        if single:
            self.ack_frames.labels("single").inc(single)
        if multiple:
            self.ack_frames.labels("multiple").inc(multiple)

    def observe_queue(self, queue: str, kind: str, domain: str, ready: int, consumers: int) -> None:
        """A sampled queue depth; `kind` is domain, retry, dead or unrouted."""
        self.queue_ready.labels(queue, kind, domain).set(ready)
        self.queue_consumers.labels(queue, kind, domain).set(consumers)

    def observe_frontier(self, ready: int) -> None:
        """The sum of the sampled domain queues' ready messages: one series an autoscaler can read."""
        self.frontier_ready.set(ready)
