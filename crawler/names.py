"""Every name the crawler gives to RabbitMQ and Redis objects, and their TTLs: spelled out only here."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PREFIX = "crawler"

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
# The frontier routing key of webhook deliveries coming back from a retry tier or a replay: the
# frontier binds it to the webhooks queue. No host is in upper case, nor has a `^`.
WEBHOOK_KEY = "^WEBHOOKS"

# Redis TTLs, in seconds.
ROBOTS_TTL = 3600  # a robots.txt fetched (or answered 4xx) is trusted this long
ROBOTS_ERROR_TTL = 60  # a robots.txt that failed (5xx, unreachable) is asked again after this
ROBOTS_LOCK_TTL = 30  # one worker fetches a robots.txt for the fleet; others wait at most this
# A lost dedup store is rebuilt from the sink by one process holding this lock; it renews it after
# each batch it streams, so a rebuilder that dies frees it for another within this long.
REBUILD_LOCK_TTL = 30
# A domain's rate bucket outlives its last use by at least this (more while it is paused or backed
# off): a bucket asked within it and found missing was lost with Redis, not expired.
BUCKET_KEPT = 60.0

# DNS: one resolver of the fleet looks a host up while the others wait for its answer; it holds the
# host's lookup at most its deadline plus this.
DNS_LOCK_GRACE = 2.0

# A classic queue's priority levels cost memory per level; 0..9 is what domains.yaml allows.
MAX_PRIORITY = 9
# Quorum queues (RabbitMQ < 4.0) have no priorities: messages at or above FIRST_BAND (seeds, links a
# URL rule raised above the default) go to a domain's first-band queue, marked by this last word of
# their routing key (no host name ends in it), and a worker consumes both of the domain's queues.
FIRST_BAND = 6
FIRST_BAND_WORD = "^"

# A worker's heartbeat key lives this long unless renewed; it is renewed every third of it, so a
# worker must miss three beats in a row before it shows as gone.
HEARTBEAT_TTL = 30.0
# crawler-gateway: an exit's request counts as in flight at most this long past its deadline (a
# replica killed mid-request leaves its count to expire), and a sticky session's default life.
GW_INFLIGHT_GRACE = 30.0
GW_SESSION_TTL = 600.0
# crawler-gateway's ban and health bookkeeping: a pair's ban streak is forgotten after this many
# cooldown.max of quiet, an exit's failure streak after GW_FAILS_TTL, its death streak after
# GW_DEATHS_TTL; an exit stays dead at most GW_DEAD_MOST however often it died.
GW_STRIKES_KEPT = 4
GW_FAILS_TTL = 3600.0
GW_DEATHS_TTL = 86400.0
GW_DEAD_MOST = 3600.0
# The logger of each URL's way through the fleet (routed, delivered, acked, parked, returned, dropped),
# at DEBUG: off unless a worker runs with --trace (a soak's ledger reads it for a URL it cannot find).
TRACE_LOGGER = "crawler.trace"
LOG_FIELDS = "fields"  # the LogRecord attribute carrying a log line's structured fields
# How often a consumer reads the paused domains: a pause or resume takes hold fleet-wide within it.
PAUSE_POLL = 0.5
# Seconds a stopping consumer waits for its publishing channel to close: RabbitMQ does not answer on
# a connection it blocks (a resource alarm), and the connection's own close ends the channel anyway.
CLOSE_WAIT = 5.0
# Seconds a stopping program waits for a broker connection's close: past it the socket ends with the
# process, and RabbitMQ returns what was unacked all the same.
CONNECTION_CLOSE_WAIT = 15.0
# A worker that went silent stays listed (as gone) this long, so a person notices it.
GONE_KEPT = 24 * 3600.0
# A round of sitemap reading remembers the files it has read this long: far longer than a round takes.
SITEMAP_ROUND_TTL = 24 * 3600
# Workers add what their fetches answered to a Redis tally per domain per ANSWERS_STEP seconds, kept
# ANSWERS_KEPT: the console reads the fleet's recent errors by status class from it, without Prometheus.
ANSWERS_STEP = 10
ANSWERS_KEPT = 900
# A crawler-gateway replica reports its exits and keys every third of this; its report expires after
# it unless renewed.
GATEWAY_REPORT_TTL = 15.0


def delay_label(seconds: float) -> str:
    """A delay as a person writes it: 1s, 1.5s, 30s, 5m, 2h."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True)
class Names:
    """Names of one crawl's exchanges, queues and Redis keys, all under one prefix."""

    prefix: str = DEFAULT_PREFIX
    # The crawl whose dedup and quota keys these names give; None: the default crawl (no id).
    crawl: str | None = None

    def for_crawl(self, crawl: str | None) -> Names:
        """These names, with dedup and page-count keys of crawl `crawl` (None: the default crawl)."""
        return self if crawl == self.crawl else Names(self.prefix, crawl)

    @property
    def _seen(self) -> str:
        # The default crawl keeps the keys it always had, so messages queued before ids still work.
        return f"{self.prefix}:seen" if self.crawl is None else f"{self.prefix}:c:{self.crawl}:seen"

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

    def retry_queue(self, delay: float) -> str:
        """The delay queue of one retry tier."""
        return f"{self.prefix}.retry.{delay_label(delay)}"

    @property
    def seen_key(self) -> str:
        """Redis hash of canonical-URL fingerprints already routed."""
        return self._seen

    @property
    def seen_meta_key(self) -> str:
        """Redis hash of the dedup store's layout (mode and sizing) and, but for plain, its URL count.

        Its layout is made at the store's first claim: a claim finding none knows Redis lost the store.
        """
        return f"{self._seen}:meta"

    @property
    def seen_pending_key(self) -> str:
        """Redis hash of the compact and Bloom stores' claims whose publish is not confirmed yet."""
        return f"{self._seen}:pending"

    def seen_bucket_key(self, bucket: int) -> str:
        """Redis set of one bucket of the compact store's fingerprints."""
        return f"{self._seen}:c:{bucket}"

    def seen_bloom_key(self, part: int) -> str:
        """Redis string, one bitmap of the Bloom store."""
        return f"{self._seen}:b:{part}"

    @property
    def seen_taken_key(self) -> str:
        """Redis hash of pages taken for fetching since the store was rebuilt (after Redis was lost)."""
        return f"{self._seen}:taken"

    @property
    def rebuild_lock_key(self) -> str:
        """Redis lock held by the one process rebuilding a lost dedup store from the sink."""
        return f"{self._seen}:rebuild-lock"

    def near_bucket_key(self, blocks: int, table: int, value: int) -> str:
        """Redis set of one bucket of the near-duplicate index: the simhashes whose block `table` (of
        `blocks`) is `value`, each stored as its other bits. Fleet-wide: every crawl under the prefix."""
        return f"{self.prefix}:near:{blocks}:{table}:{value:x}"

    def near_pages_key(self, blocks: int) -> str:
        """Redis hash of the near-duplicate index: simhash (decimal) -> the first page that had it."""
        return f"{self.prefix}:near:{blocks}:pages"

    def bucket_key(self, domain: str) -> str:
        """Redis hash of a domain's token bucket and back-off state."""
        return f"{self.prefix}:rate:{domain}"

    def ip_bucket_key(self, address: str) -> str:
        """Redis hash of one IP address's token bucket: every host resolving to it shares it."""
        return f"{self.prefix}:rate:ip:{address}"

    def dns_key(self, host: str) -> str:
        """Redis string of a host's DNS answer (its addresses, or why it has none) for its TTL, or of
        its failures in a row and when it may be asked again."""
        return f"{self.prefix}:dns:{host}"

    def dns_lock_key(self, host: str) -> str:
        """Redis lock held by the one resolver of the fleet looking a host up."""
        return f"{self.prefix}:dns-lock:{host}"

    @property
    def dns_parked_key(self) -> str:
        """Redis sorted set of hosts parked for failing to resolve (score: until when, ms)."""
        return f"{self.prefix}:dns-parked"

    @property
    def hosts_key(self) -> str:
        """Redis set of the hosts admitted to this crawl (for discover's max_hosts)."""
        return f"{self.prefix}:hosts" if self.crawl is None else f"{self.prefix}:c:{self.crawl}:hosts"

    @property
    def registered_key(self) -> str:
        """Redis hash of this crawl's hosts per registered domain (for the registered-domain cap)."""
        if self.crawl is None:
            return f"{self.prefix}:registered"
        return f"{self.prefix}:c:{self.crawl}:registered"

    def pages_key(self, domain: str) -> str:
        """Redis counter of pages fetched from a domain in this crawl (for max_pages)."""
        if self.crawl is None:
            return f"{self.prefix}:pages:{domain}"
        return f"{self.prefix}:c:{self.crawl}:pages:{domain}"

    def credits_key(self, domain: str) -> str:
        """Redis float counter of fetch-service credits a domain spent in this crawl (max_credits)."""
        return f"{self.prefix}:credits:{domain}"

    def robots_key(self, origin: str) -> str:
        """Redis string caching one origin's robots.txt."""
        return f"{self.prefix}:robots:{origin}"

    def sitemap_round_key(self, round_: str) -> str:
        """Redis hash of the sitemap files a round of reading has read or queued: URL -> the task
        that queued it (so that task, delivered again, may queue it again)."""
        return f"{self.prefix}:sitemap-round:{round_}"

    def robots_lock_key(self, origin: str) -> str:
        """Redis lock held by the worker fetching an origin's robots.txt."""
        return f"{self.prefix}:robots-lock:{origin}"

    # -- crawler-gateway: every replica shares these, so the fleet acts as one --------------------

    def gw_inflight_key(self, exit_id: str) -> str:
        """Redis sorted set of an exit's requests in flight (member: request id, score: expiry ms)."""
        return f"{self.prefix}:gw:inflight:{exit_id}"

    def gw_last_key(self, exit_id: str, domain: str) -> str:
        """Redis string: when (ms) an exit last sent a request to a domain, for min_interval."""
        return f"{self.prefix}:gw:last:{exit_id}:{domain}"

    def gw_cool_key(self, exit_id: str, domain: str) -> str:
        """Redis string whose TTL is an (exit, domain) pair's cooldown for every key: set once bans
        came from ban_quorum keys."""
        return f"{self.prefix}:gw:cool:{exit_id}:{domain}"

    def gw_key_cool_key(self, key_id: str, exit_id: str, domain: str) -> str:
        """Redis string whose TTL is an (exit, domain) pair's cooldown for the one key that met a ban."""
        return f"{self.prefix}:gw:keycool:{key_id}:{exit_id}:{domain}"

    def gw_strikes_key(self, key_id: str, exit_id: str, domain: str) -> str:
        """Redis counter of a key's bans in a row through an (exit, domain) pair: the cooldown's exponent."""
        return f"{self.prefix}:gw:strikes:{key_id}:{exit_id}:{domain}"

    def gw_banners_key(self, exit_id: str, domain: str) -> str:
        """Redis sorted set of the keys that met a ban through an (exit, domain) pair (score: when, ms)."""
        return f"{self.prefix}:gw:banners:{exit_id}:{domain}"

    def gw_failers_key(self, exit_id: str) -> str:
        """Redis sorted set of the keys whose requests an exit failed (score: when, ms)."""
        return f"{self.prefix}:gw:failers:{exit_id}"

    def gw_fails_key(self, exit_id: str) -> str:
        """Redis counter of an exit's proxy failures in a row, whatever the domain."""
        return f"{self.prefix}:gw:fails:{exit_id}"

    def gw_dead_key(self, exit_id: str) -> str:
        """Redis string, present while an exit is dead; its TTL is when it is probed again."""
        return f"{self.prefix}:gw:dead:{exit_id}"

    def gw_deaths_key(self, exit_id: str) -> str:
        """Redis counter of an exit's deaths in a row: how long it stays dead doubles with it."""
        return f"{self.prefix}:gw:deaths:{exit_id}"

    def gw_sticky_key(self, key_id: str, session: str) -> str:
        """Redis string: the exit an API key's session sticks to, for session_ttl."""
        return f"{self.prefix}:gw:sticky:{key_id}:{session}"

    def gw_key_inflight_key(self, key_id: str) -> str:
        """Redis sorted set of an API key's requests in flight (member: request id|price reserved,
        score: expiry ms), for its max_concurrency and budget."""
        return f"{self.prefix}:gw:keyflight:{key_id}"

    def gw_credits_key(self, key_id: str) -> str:
        """Redis float counter of the credits an API key was charged (its ledger)."""
        return f"{self.prefix}:gw:credits:{key_id}"

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
        )

    def crawl_keys(self, crawl: str) -> str:
        """Pattern of every Redis key of one crawl's progress: dedup, page counts, outcome counts."""
        return f"{self.prefix}:c:{crawl}:*"

    def crawl_options_key(self, crawl: str) -> str:
        """Redis string, JSON of one crawl's options (domains, max_depth, max_pages), for workers."""
        return f"{self.prefix}:crawl:{crawl}"

    def crawl_pages_key(self, crawl: str) -> str:
        """Redis counter of pages fetched in one crawl, every domain together (its max_pages option)."""
        return f"{self.prefix}:c:{crawl}:total"

    def crawl_counts_key(self, crawl: str) -> str:
        """Redis hash of one crawl's outcomes, field `domain kind` -> count; its data quality counts
        are kinds too, each beginning `q:` (crawler/quality/coverage.py)."""
        return f"{self.prefix}:c:{crawl}:counts"

    def crawl_series_key(self, crawl: str) -> str:
        """Redis hash of one crawl's pages over time, field `domain step index` -> pages stored in
        [index * step, (index + 1) * step) seconds of Unix time; `start` is when its first was."""
        return f"{self.prefix}:c:{crawl}:series"

    @property
    def cancelled_key(self) -> str:
        """Redis set of cancelled crawl ids: their messages are acked, not fetched, fleet-wide."""
        return f"{self.prefix}:cancelled"

    @property
    def paused_key(self) -> str:
        """Redis set of paused domains: no consumer subscribes their queues while they are in it."""
        return f"{self.prefix}:paused"

    @property
    def paused_known_key(self) -> str:
        """Redis string set once the paused set was read from the database: gone, Redis lost it."""
        return f"{self.prefix}:paused:known"

    def worker_key(self, worker: str) -> str:
        """Redis string of one live worker's heartbeat; it expires when the worker stops beating."""
        return f"{self.prefix}:worker:{worker}"

    @property
    def workers_key(self) -> str:
        """Redis hash of every worker's last heartbeat, kept after it expires to flag silent ones."""
        return f"{self.prefix}:workers"

    def answers_key(self, step: int) -> str:
        """Redis hash of the fleet's fetch answers in one ANSWERS_STEP (field: domain, tab, kind)."""
        return f"{self.prefix}:answers:{step}"

    def gateway_key(self, replica: str) -> str:
        """Redis string of one live crawler-gateway replica's report; it expires unless renewed."""
        return f"{self.prefix}:gateway:{replica}"

    @property
    def gateways_key(self) -> str:
        """Redis hash of every gateway replica's last report, kept after it expires to flag silent ones."""
        return f"{self.prefix}:gateways"
