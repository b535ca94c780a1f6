"""How long the crawler keeps what it writes to Redis, and how long its waits and polls last, in seconds."""

from __future__ import annotations

ROBOTS_TTL = 3600  # a robots.txt fetched (or answered 4xx) is trusted this long
ROBOTS_ERROR_TTL = 60  # a robots.txt that failed (5xx, unreachable) is asked again after this
ROBOTS_LOCK_TTL = 30  # one worker fetches a robots.txt for the fleet; others wait at most this
# A lost dedup store is rebuilt from the sink by one process holding this lock; it renews it after
# each batch it streams, so a rebuilder that dies frees it for another within this long.
REBUILD_LOCK_TTL = 30
# A domain's rate bucket outlives its last use by at least this (more while it is paused or backed
# off): a bucket asked within it and found missing was lost with Redis, not expired.
BUCKET_KEPT = 60.0

# A discovered host's URL taken while its host has no rate token, and more of its URLs wait in the
# worker already, is set aside in a wait queue of one of these lengths instead of holding its shard's
# prefetch: the longest no longer than the time to its turn (crawler/worker/turns.py). The long ones
# are for a large host's line, hours long at its rate: its last pages go round a few times, not once
# every 30 s.
HOST_WAITS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
# A discovered host counts as active while its last page came to an outcome within this long.
HOST_ACTIVE_WINDOW = 60.0
# A crawl's views of its discovered hosts (queued, active, waiting) outlive their last write by this:
# a crawl left running with no worker does not keep them forever.
HOST_VIEWS_TTL = 7 * 86400

# DNS: one resolver of the fleet looks a host up while the others wait for its answer; it holds the
# host's lookup at most its deadline plus this.
DNS_LOCK_GRACE = 2.0

# A worker's heartbeat key lives this long unless renewed; it is renewed every third of it, so a
# worker must miss three beats in a row before it shows as gone.
HEARTBEAT_TTL = 30.0
# crawler-gateway: an exit's request counts as in flight at most this long past its deadline (a
# replica killed mid-request leaves its count to expire), and a sticky session's default life.
GW_INFLIGHT_GRACE = 30.0
# A crawler-gateway replica's entry in the fleet's set lapses this long after its last renewal (every
# third of it); its unsettled requests then stop counting. A lapsed entry is kept this long (more than
# any request's hold), so a request of a replica that stopped is never taken for one never seen.
GW_REPLICA_TTL = 6.0
GW_REPLICAS_KEPT = 3600.0
GW_SESSION_TTL = 600.0
# crawler-gateway's ban and health bookkeeping: a pair's ban streak is forgotten after this many
# cooldown.max of quiet, an exit's failure streak after GW_FAILS_TTL, its death streak after
# GW_DEATHS_TTL; an exit stays dead at most GW_DEAD_MOST however often it died.
GW_STRIKES_KEPT = 4
GW_FAILS_TTL = 3600.0
GW_DEATHS_TTL = 86400.0
GW_DEAD_MOST = 3600.0
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
