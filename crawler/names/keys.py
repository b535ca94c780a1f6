"""The names of the crawler's Redis keys: a crawl's progress, what the fleet shares, and the gateway's."""

from __future__ import annotations

# The one field of a crawl's counts hash without a domain: work it opened (URLs and sitemap tasks, as
# they are first claimed) less work closed (their outcomes); the crawl ends when it is back to 0.
OPEN_FIELD = "open"


class CrawlKeys:
    """Redis keys of one crawl's progress: its dedup store, its quotas and its counts."""

    __slots__ = ()
    prefix: str
    crawl: str | None

    @property
    def _seen(self) -> str:
        # The default crawl keeps the keys it always had, so messages queued before ids still work.
        return f"{self.prefix}:seen" if self.crawl is None else f"{self.prefix}:c:{self.crawl}:seen"

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

    @property
    def hosts_queued_key(self) -> str:
        """Redis sorted set of this crawl's discovered hosts with URLs queued and not yet at an
        outcome (score: how many); a host leaves it at 0. Only a crawl with an id keeps it."""
        return f"{self.prefix}:c:{self.crawl}:hosts:queued"

    @property
    def hosts_active_key(self) -> str:
        """Redis sorted set of this crawl's discovered hosts by when a page of theirs last came to an
        outcome (score: Unix seconds); trimmed to HOST_ACTIVE_WINDOW."""
        return f"{self.prefix}:c:{self.crawl}:hosts:active"

    @property
    def hosts_counts_key(self) -> str:
        """Redis hash of this crawl's discovered hosts' outcome counts, field `host kind`, which the
        views of hosts read; the crawl's counts hold them all as one domain, DISCOVERED_LABEL."""
        return f"{self.prefix}:c:{self.crawl}:hosts:counts"

    @property
    def hosts_waiting_key(self) -> str:
        """Redis sorted set of this crawl's discovered hosts with URLs waiting out of their shard (a
        host wait queue or a retry tier; score: how many); a host leaves it at 0."""
        return f"{self.prefix}:c:{self.crawl}:hosts:waiting"

    def pages_key(self, domain: str) -> str:
        """Redis counter of pages fetched from a domain in this crawl (for max_pages)."""
        if self.crawl is None:
            return f"{self.prefix}:pages:{domain}"
        return f"{self.prefix}:c:{self.crawl}:pages:{domain}"

    def credits_key(self, domain: str) -> str:
        """Redis float counter of fetch-service credits a domain spent in this crawl (max_credits)."""
        return f"{self.prefix}:credits:{domain}"

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

    def crawl_alerted_key(self, crawl: str) -> str:
        """Redis set of one crawl's coverage alerts already on the change feed: each is published once."""
        return f"{self.prefix}:c:{crawl}:alerted"


class FleetKeys:
    """Redis keys every crawl under the prefix shares: politeness, DNS, robots.txt, near-duplicates,
    pauses and cancels, and the workers' and gateways' liveness."""

    __slots__ = ()
    prefix: str

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

    def line_key(self, host: str) -> str:
        """Redis string of the end of a host's line: the turn (Unix seconds) after the last one given
        to a page of the host layout parked for want of its host's token, by any worker."""
        return f"{self.prefix}:line:{host}"

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
    def host_crawls_key(self) -> str:
        """Redis set of the crawls that admitted discovered hosts: the views of hosts sum theirs."""
        return f"{self.prefix}:host-crawls"

    @property
    def dns_parked_key(self) -> str:
        """Redis sorted set of hosts parked for failing to resolve (score: until when, ms)."""
        return f"{self.prefix}:dns-parked"

    def robots_key(self, origin: str) -> str:
        """Redis string caching one origin's robots.txt."""
        return f"{self.prefix}:robots:{origin}"

    def robots_lock_key(self, origin: str) -> str:
        """Redis lock held by the worker fetching an origin's robots.txt."""
        return f"{self.prefix}:robots-lock:{origin}"

    def sitemap_round_key(self, round_: str) -> str:
        """Redis hash of the sitemap files a round of reading has read or queued: URL -> the task
        that queued it (so that task, delivered again, may queue it again)."""
        return f"{self.prefix}:sitemap-round:{round_}"

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

    @property
    def alerting_key(self) -> str:
        """Redis string held by the one worker reading the current crawls' coverage for alerts this
        interval; it expires with the interval."""
        return f"{self.prefix}:alerting"

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


class GatewayKeys:
    """Redis keys of crawler-gateway: every replica shares these, so the fleet acts as one."""

    __slots__ = ()
    prefix: str

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

    def gw_replicas_key(self) -> str:
        """Redis sorted set of crawler-gateway replicas (score: ms their entry lapses at, Redis' clock)."""
        return f"{self.prefix}:gw:replicas"

    def gw_credits_key(self, key_id: str) -> str:
        """Redis float counter of the credits an API key was charged (its ledger)."""
        return f"{self.prefix}:gw:credits:{key_id}"
