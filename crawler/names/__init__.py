"""Every name the crawler gives to RabbitMQ and Redis objects, and their TTLs: spelled out only in
this package (queues.py, keys.py, durations.py)."""

from __future__ import annotations

from dataclasses import dataclass

from crawler.names.durations import (
    ANSWERS_KEPT,
    ANSWERS_STEP,
    BUCKET_KEPT,
    CLOSE_WAIT,
    CONNECTION_CLOSE_WAIT,
    DNS_LOCK_GRACE,
    GATEWAY_REPORT_TTL,
    GONE_KEPT,
    GW_DEAD_MOST,
    GW_DEATHS_TTL,
    GW_FAILS_TTL,
    GW_INFLIGHT_GRACE,
    GW_REPLICA_TTL,
    GW_REPLICAS_KEPT,
    GW_SESSION_TTL,
    GW_STRIKES_KEPT,
    HEARTBEAT_TTL,
    HOST_ACTIVE_WINDOW,
    HOST_VIEWS_TTL,
    HOST_WAITS,
    PAUSE_POLL,
    REBUILD_LOCK_TTL,
    ROBOTS_ERROR_TTL,
    ROBOTS_LOCK_TTL,
    ROBOTS_TTL,
    SITEMAP_ROUND_TTL,
)
from crawler.names.keys import (
    OPEN_FIELD,
    CrawlKeys,
    FleetKeys,
    GatewayKeys,
)
from crawler.names.queues import (
    COVERAGE_ALERT_KEY,
    DISCOVERED_LABEL,
    FIRST_BAND,
    FIRST_BAND_WORD,
    HEADER_ATTEMPTS,
    HEADER_CONSUMER,
    HEADER_CREDITS,
    HEADER_DOMAIN,
    HEADER_ERROR,
    HEADER_REASON,
    HEADER_RETRY_TIER,
    HEADER_STATUS,
    HEADER_TIME,
    HEADER_TURN,
    HEADER_WEBHOOK,
    HOST_SHARD_WORD,
    LAYOUT_LABEL,
    LISTED_LABEL,
    MAX_PRIORITY,
    WEBHOOK_KEY,
    QueueNames,
    delay_label,
    host_wait_label,
)

DEFAULT_PREFIX = "crawler"

# The logger of each URL's way through the fleet (routed, delivered, acked, parked, returned, dropped),
# at DEBUG: off unless a worker runs with --trace (a soak's ledger reads it for a URL it cannot find).
TRACE_LOGGER = "crawler.trace"
LOG_FIELDS = "fields"  # the LogRecord attribute carrying a log line's structured fields

# Links whose canonical form, host, path shape and registered domain a process remembers (each, least
# recently used dropped): a site's pages repeat their navigation within a few pages, and on the open
# web a link to a new host is rarely met again, so a longer memory costs a worker 0.7 KB a link for
# few hits.
LINKS_REMEMBERED = 8_192


@dataclass(frozen=True, slots=True)
class Names(QueueNames, CrawlKeys, FleetKeys, GatewayKeys):
    """Names of one crawl's exchanges, queues and Redis keys, all under one prefix."""

    prefix: str = DEFAULT_PREFIX
    # The crawl whose dedup and quota keys these names give; None: the default crawl (no id).
    crawl: str | None = None

    def for_crawl(self, crawl: str | None) -> Names:
        """These names, with dedup and page-count keys of crawl `crawl` (None: the default crawl)."""
        return self if crawl == self.crawl else Names(self.prefix, crawl)

    @property
    def progress_patterns(self) -> tuple[str, ...]:
        """Key patterns of a crawl's progress, which a reset forgets (robots.txt stays cached)."""
        return (
            self.seen_key,
            f"{self.prefix}:seen:*",
            f"{self.prefix}:pages:*",
            f"{self.prefix}:credits:*",
            f"{self.prefix}:rate:*",
            f"{self.prefix}:c:*",
            f"{self.prefix}:sitemap-round:*",
            f"{self.prefix}:hosts",
            f"{self.prefix}:registered",
            f"{self.prefix}:host-crawls",
        )


__all__ = [
    "ANSWERS_KEPT",
    "ANSWERS_STEP",
    "BUCKET_KEPT",
    "CLOSE_WAIT",
    "CONNECTION_CLOSE_WAIT",
    "COVERAGE_ALERT_KEY",
    "DEFAULT_PREFIX",
    "DISCOVERED_LABEL",
    "DNS_LOCK_GRACE",
    "FIRST_BAND",
    "FIRST_BAND_WORD",
    "GATEWAY_REPORT_TTL",
    "GONE_KEPT",
    "GW_DEAD_MOST",
    "GW_DEATHS_TTL",
    "GW_FAILS_TTL",
    "GW_INFLIGHT_GRACE",
    "GW_REPLICAS_KEPT",
    "GW_REPLICA_TTL",
    "GW_SESSION_TTL",
    "GW_STRIKES_KEPT",
    "HEADER_ATTEMPTS",
    "HEADER_CONSUMER",
    "HEADER_CREDITS",
    "HEADER_DOMAIN",
    "HEADER_ERROR",
    "HEADER_REASON",
    "HEADER_RETRY_TIER",
    "HEADER_STATUS",
    "HEADER_TIME",
    "HEADER_TURN",
    "HEADER_WEBHOOK",
    "HEARTBEAT_TTL",
    "HOST_ACTIVE_WINDOW",
    "HOST_SHARD_WORD",
    "HOST_VIEWS_TTL",
    "HOST_WAITS",
    "LAYOUT_LABEL",
    "LISTED_LABEL",
    "LOG_FIELDS",
    "MAX_PRIORITY",
    "OPEN_FIELD",
    "PAUSE_POLL",
    "REBUILD_LOCK_TTL",
    "ROBOTS_ERROR_TTL",
    "ROBOTS_LOCK_TTL",
    "ROBOTS_TTL",
    "SITEMAP_ROUND_TTL",
    "TRACE_LOGGER",
    "WEBHOOK_KEY",
    "CrawlKeys",
    "FleetKeys",
    "GatewayKeys",
    "Names",
    "QueueNames",
    "delay_label",
    "host_wait_label",
]
