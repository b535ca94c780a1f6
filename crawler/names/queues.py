"""The names the crawler gives to RabbitMQ's objects and to its messages' headers."""

from __future__ import annotations

# Headers the crawler sets on its messages (never `x-`: RabbitMQ owns those).
HEADER_ATTEMPTS = "crawler-attempts"
HEADER_REASON = "crawler-reason"
HEADER_ERROR = "crawler-error"
HEADER_STATUS = "crawler-status"
HEADER_DOMAIN = "crawler-domain"
HEADER_CONSUMER = "crawler-consumer"
HEADER_TIME = "crawler-time"
HEADER_RETRY_TIER = "crawler-retry-tier"
HEADER_CREDITS = "crawler-credits"  # credits the page's earlier attempts were charged
HEADER_WEBHOOK = "crawler-webhook"  # the one receiver (its key) a webhook delivery's copy is for
HEADER_TURN = "crawler-turn"  # when a page waiting for its host's token is next in line (Unix ms)
# The frontier routing key of webhook deliveries coming back from a retry tier or a replay: the
# frontier binds it to the webhooks queue. No host is in upper case, nor has a `^`.
WEBHOOK_KEY = "^WEBHOOKS"
# The change feed's routing key of coverage alerts (docs/quality.md): unlike any domain, so a queue
# bound to a domain's versions is never sent them.
COVERAGE_ALERT_KEY = "^COVERAGE"


# A classic queue's priority levels cost memory per level; 0..9 is what domains.yaml allows.
MAX_PRIORITY = 9
# Quorum queues (RabbitMQ < 4.0) have no priorities: messages at or above FIRST_BAND (seeds, links a
# URL rule raised above the default) go to a domain's first-band queue, marked by this last word of
# their routing key (no host name ends in it), and a worker consumes both of the domain's queues.
FIRST_BAND = 6
FIRST_BAND_WORD = "^"
# A discovered host's URLs go to the frontier exchange under `{host}.{HOST_SHARD_WORD}{shard}`: the
# last word names its shard queue, and no listed domain's binding (`#.{domain}`) can match it, since
# no host name has a `~`.
HOST_SHARD_WORD = "~s"
# The one `domain` label value of every discovered host in metrics and views: a label value per host
# would be a series per host. No host name has a `~`.
DISCOVERED_LABEL = "~discovered"
# The one `domain` label value of every domain of a domains file served by the host layout.
LISTED_LABEL = "~listed"
# The one `domain` label value of the scheduler's metrics for every domain the host layout serves,
# listed and discovered alike: it claims their due pages in one.
LAYOUT_LABEL = "~layout"


def host_wait_label(seconds: float) -> str:
    """The retry-tier header value of a host wait queue (never a retry tier's own, `1s`, `5m`)."""
    return f"host {delay_label(seconds)}"


def delay_label(seconds: float) -> str:
    """A delay as a person writes it: 1s, 1.5s, 30s, 5m, 2h."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


class QueueNames:
    """Exchanges and queues under one prefix."""

    __slots__ = ()
    prefix: str

    @property
    def frontier(self) -> str:
        """Topic exchange every URL is published to, routed by host."""
        return f"{self.prefix}.frontier"

    @property
    def unrouted(self) -> str:
        """Alternate exchange and queue for URLs of hosts no domain queue takes."""
        return f"{self.prefix}.unrouted"

    @property
    def dead(self) -> str:
        """Exchange and queue of messages set aside for a person: dead for good or invalid."""
        return f"{self.prefix}.dead"

    @property
    def changes(self) -> str:
        """Topic exchange of the change feed: each new version of a page, routed by its domain."""
        return f"{self.prefix}.changes"

    @property
    def webhooks(self) -> str:
        """Queue of the change feed's versions to POST to webhooks, and of their retries."""
        return f"{self.prefix}.webhooks"

    @property
    def retry(self) -> str:
        """Headers exchange routing a message to its delay tier."""
        return f"{self.prefix}.retry"

    def domain_queue(self, domain: str) -> str:
        """The work queue of one configured domain."""
        return f"{self.prefix}.domain.{domain}"

    def first_band(self, domain: str) -> str:
        """A quorum frontier's queue of one domain's first-priority work (seeds and raised links)."""
        return f"{self.prefix}.first.{domain}"

    def host_shard(self, shard: int) -> str:
        """One of the shard queues every discovered host's URLs share (a host always in the same)."""
        return f"{self.prefix}.hosts.{shard}"

    def host_wait(self, seconds: float) -> str:
        """A queue holding a discovered host's URL `seconds` while its host is not ready, then
        returning it to its shard."""
        return f"{self.prefix}.hosts.wait.{delay_label(seconds)}"

    def retry_queue(self, delay: float) -> str:
        """The delay queue of one retry tier."""
        return f"{self.prefix}.retry.{delay_label(delay)}"
