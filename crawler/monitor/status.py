"""How a crawl stands: queue depths from RabbitMQ, stored pages from the database, workers and the
discovered hosts in aggregate from Redis."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard
from urllib.parse import quote, unquote, urlsplit

import httpx
from aio_pika.abc import AbstractRobustConnection
from aiormq.exceptions import ChannelNotFoundEntity
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from crawler import connections
from crawler.config import CrawlConfig
from crawler.failover import first_node
from crawler.frontier.concurrency import together
from crawler.frontier.crawls import CrawlState
from crawler.frontier.exchanges import domain_queues, host_queues
from crawler.hosts.shown import shown
from crawler.hosts.views import HostCounts, TopHost, host_counts
from crawler.monitor.heartbeat import workers
from crawler.monitor.quality import current_quality
from crawler.names import DISCOVERED_LABEL, HOST_WAITS, Names
from crawler.quality.report import alerts_json
from crawler.settings import Settings
from crawler.sink.crawls import CrawlRecord, CrawlStore
from crawler.sink.database import Database
from crawler.sink.schedule import Backlog, Schedule
from crawler.sink.sitemaps import URL_OUTCOMES, SitemapStore
from crawler.sink.sql import Sink, check_schema

MANAGEMENT_PORT = 15672
RATE_WINDOW = 60  # seconds of stored pages behind `pages_per_second`


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """One queue's messages and consumers; `unacked` is None when the management API is away."""

    name: str
    ready: int
    unacked: int | None
    consumers: int

    @classmethod
    def of_bands(cls, bands: Sequence[QueueDepth]) -> QueueDepth:
        """A domain's depth from its queues (a quorum frontier's two bands); each worker consumes all."""
        first = bands[0]
        unacked = [b.unacked for b in bands]
        return cls(
            first.name,
            sum(b.ready for b in bands),
            None if None in unacked else sum(u or 0 for u in unacked),
            max(b.consumers for b in bands),
        )


@dataclass(frozen=True, slots=True)
class Freshness:
    """A domain's schedule: its pages due now, how long the oldest of them has waited (None: none is
    due), and its pages by what their last fetch found (new, changed, not_modified, ...)."""

    due: int = 0
    overdue_seconds: float | None = None
    found: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Sitemaps:
    """A domain's sitemap files as last read, and what their URLs became: routed as new, known
    already, refreshed for their lastmod, or dropped (by reason)."""

    files: int = 0
    discovered: int = 0
    known: int = 0
    modified: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, totals: dict[str, int]) -> Sitemaps:
        """From a domain's summed readings (SitemapStore.totals)."""
        dropped = {k: n for k, n in totals.items() if k != "files" and k not in URL_OUTCOMES}
        return cls(
            totals.get("files", 0),
            totals.get("discovered", 0),
            totals.get("known", 0),
            totals.get("modified", 0),
            dropped,
        )


@dataclass(frozen=True, slots=True)
class DomainStatus:
    """One domain's queue and stored pages, and the pages its crawls skipped."""

    domain: str
    queue: QueueDepth
    pages_ok: int
    pages_failed: int
    pages_per_second: float  # pages stored over the last RATE_WINDOW seconds
    credits: float = 0.0  # fetch-service credits its stored pages were charged (all attempts)
    freshness: Freshness = field(default_factory=Freshness)
    sitemaps: Sitemaps = field(default_factory=Sitemaps)
    # Not fetched by policy (robots.txt, max_pages, max_credits), summed over every crawl recorded:
    # such a page has no row, so its crawls' counts are all there is (one skipped twice counts twice).
    pages_skipped: int = 0


@dataclass(frozen=True, slots=True)
class DiscoveredStatus:
    """The discovered hosts in aggregate (`discover: follow: all`), never a row per host: how many
    are known, active, waiting and parked (crawler/hosts/views.py), their shard queues and wait
    queues summed, and the hosts with the most URLs queued."""

    follow: bool
    known: int
    active: int
    waiting: int
    parked: int
    shards: QueueDepth  # the shard queues summed; `name` says how many
    waits: QueueDepth  # the host wait queues summed
    top: list[TopHost]
    crawls: int  # crawls whose hosts are counted
    listed: int  # a domains file's domains the host layout serves (past frontier.max_domain_queues)
    due: int = 0  # the host layout's stored pages due for a refresh now, of every domain it serves
    overdue_seconds: float | None = None  # how long the oldest of them has waited (None: none due)


def _summed(name: str, found: Sequence[QueueDepth]) -> QueueDepth:
    unacked = [q.unacked for q in found]
    return QueueDepth(
        name,
        sum(q.ready for q in found),
        None if None in unacked else sum(u or 0 for u in unacked),
        max((q.consumers for q in found), default=0),
    )


def discovered_status(
    config: CrawlConfig,
    names: Names,
    counts: HostCounts,
    depths: dict[str, QueueDepth],
    due: Backlog | None = None,
    now: datetime | None = None,
) -> DiscoveredStatus:
    """The discovered hosts' summary from their counts, the queue depths and the layout's due pages
    read at `now`."""
    oldest = due.oldest if due is not None else None
    shards = [depths.get(names.host_shard(s)) for s in range(config.discover.shards)]
    waits = [depths.get(names.host_wait(w)) for w in HOST_WAITS]
    return DiscoveredStatus(
        config.host_layout,
        counts.known,
        counts.active,
        counts.waiting,
        counts.parked,
        _summed(f"{len(shards)} shards", [q for q in shards if q is not None]),
        _summed(f"{len(waits)} waits", [q for q in waits if q is not None]),
        counts.top,
        counts.crawls,
        len(config.layout_domains),
        due.due if due is not None else 0,
        round((now - oldest).total_seconds(), 1) if oldest is not None and now is not None else None,
    )


def management_url(amqp_url: str, api_url: str | None = None) -> tuple[str, str, tuple[str, str]]:
    """Management API base, vhost and credentials for an AMQP URL.

    The API is `api_url` if given (its credentials, else the AMQP URL's), else the AMQP host on 15672.
    """
    parts = urlsplit(first_node(amqp_url))  # a cluster's nodes share vhosts and users
    vhost = unquote(parts.path[1:]) or "/"
    auth = (unquote(parts.username or "guest"), unquote(parts.password or "guest"))
    if not api_url:
        return f"http://{parts.hostname or 'localhost'}:{MANAGEMENT_PORT}", vhost, auth
    api = urlsplit(api_url)
    if api.username is not None:
        auth = (unquote(api.username), unquote(api.password or ""))
    host = api.hostname or "localhost"
    if ":" in host:
        host = f"[{host}]"
    port = f":{api.port}" if api.port else ""
    return f"{api.scheme or 'http'}://{host}{port}{api.path.rstrip('/')}", vhost, auth


async def _from_management(settings: Settings, queues: list[str]) -> dict[str, QueueDepth] | None:
    base, vhost, auth = management_url(settings.amqp_url, settings.management_url)
    try:
        async with httpx.AsyncClient(base_url=base, auth=auth, timeout=5, trust_env=False) as client:
            resp = await client.get(f"/api/queues/{quote(vhost, safe='')}")
            resp.raise_for_status()
    except httpx.HTTPError:
        return None
    found: dict[str, Any] = {q["name"]: q for q in resp.json()}
    return {
        name: QueueDepth(
            name,
            int(found[name].get("messages_ready", 0)),
            int(found[name].get("messages_unacknowledged", 0)),
            int(found[name].get("consumers", 0)),
        )
        for name in queues
        if name in found
    }


async def _from_broker(connection: AbstractRobustConnection, queues: list[str]) -> dict[str, QueueDepth]:
    out = {}
    for name in queues:
        # A passive declare of a missing queue closes its channel: one channel per queue.
        channel = await connection.channel()
        try:
            queue = await channel.declare_queue(name, passive=True)
        except ChannelNotFoundEntity:  # not declared yet: no depth; any other failure is no answer
            continue
        finally:
            if not channel.is_closed:
                await channel.close()
        result = queue.declaration_result
        out[name] = QueueDepth(name, result.message_count or 0, None, result.consumer_count or 0)
    return out


async def queue_depths(
    settings: Settings, queues: list[str], connection: AbstractRobustConnection
) -> tuple[dict[str, QueueDepth], str]:
    """Depths of `queues`, and where they came from: "management" API, or "passive" declares on
    `connection` (the broker the crawl uses: a management API answering for another is no proof)."""
    depths = await _from_management(settings, queues)
    if depths is not None:
        return depths, "management"
    return await _from_broker(connection, queues), "passive"


@dataclass(frozen=True, slots=True)
class _Stored:
    """What the sink says: pages per domain, stored lately, credits, due now, and as last found; the
    crawls recorded."""

    counts: dict[str, tuple[int, int]]
    recent: dict[str, int]
    credits: dict[str, float]
    backlog: dict[str, Backlog]
    layout: Backlog | None  # the host layout's due pages, if it serves pages that recrawl
    found: dict[str, dict[str, int]]
    sitemaps: dict[str, dict[str, int]]
    crawls: list[CrawlRecord]


def _stored(database: Database, config: CrawlConfig, domains: list[str]) -> _Stored:
    check_schema(database)  # a status read creates nothing
    sink, schedule, sitemaps = Sink(database), Schedule(database), SitemapStore(database)
    now = datetime.now(UTC)
    since = now - timedelta(seconds=RATE_WINDOW)
    return _Stored(
        sink.counts(),
        sink.counts_since(since),
        sink.credits(),
        schedule.backlog(domains, now),
        schedule.backlog_outside(list(config.rules), now) if config.layout_recrawls else None,
        schedule.found(domains),
        sitemaps.totals(domains),
        CrawlStore(database).list(None, None),
    )


async def _quality_alerts(
    settings: Settings, config: CrawlConfig, database: Database
) -> list[dict[str, str]]:
    """The coverage alerts (docs/quality.md) of the running crawls, and of the newest crawl if it ended."""
    async with connections.redis(settings.redis_url) as redis:
        reports = await current_quality(CrawlState(redis, settings.names), CrawlStore(database), config)
    return alerts_json(reports)


async def _host_counts(settings: Settings) -> HostCounts:
    async with connections.redis(settings.redis_url) as redis:
        return await host_counts(redis, settings.names)


async def _workers(settings: Settings) -> list[dict[str, Any]]:
    async with connections.redis(settings.redis_url) as redis:
        found = await workers(redis, settings.names)
    return [{"state": w.state, "age": w.age, **asdict(w.worker)} for w in found]


async def _skipped(settings: Settings, crawls: list[CrawlRecord]) -> dict[str, int]:
    """Pages skipped per domain over `crawls`, counted as each crawl's own view counts them."""
    out: dict[str, int] = {}
    async with connections.redis(settings.redis_url) as redis:
        state = CrawlState(redis, settings.names)
        for crawl in crawls:
            for domain, counts in (await state.shown(crawl)).items():
                out[domain] = out.get(domain, 0) + counts.get("skipped", 0)
    return out


async def status(
    settings: Settings,
    config: CrawlConfig,
    connection: AbstractRobustConnection | None = None,
    database: Database | None = None,
) -> dict[str, Any]:
    """The crawl's status as plain data (what `crawler status --json` prints); ServiceUnavailable if
    the broker, Redis or the database cannot be read. `connection`: the broker's, else one of its own;
    `database`: the process's, else one of its own for this read."""
    if connection is None:
        async with connections.broker(settings.amqp_url, "crawler status") as own:
            return await status(settings, config, own, database)
    if database is None:
        with Database(settings.database_url) as own_database:
            return await status(settings, config, connection, own_database)
    names = settings.names
    extra = [names.unrouted, names.dead, *(names.retry_queue(d) for d in config.retry_tiers)]
    chosen = sorted(config.domains)
    bands = {d: [q.name for q in domain_queues(names, d, config.frontier)] for d in chosen}
    queues = [q for d in chosen for q in bands[d]]
    hosts = [q.name for q in host_queues(config, names)]
    # When one read fails the others are cancelled and awaited here, while the connection they use
    # is open, so the failure is one line and the program ends.
    (depths, source), stored, found, counts = await together(
        queue_depths(settings, queues + extra + hosts, connection),
        asyncio.to_thread(_stored, database, config, chosen),
        _workers(settings),
        _host_counts(settings),
    )
    skipped = await _skipped(settings, stored.crawls)
    alerts = await _quality_alerts(settings, config, database)  # the schema was checked by _stored
    now = datetime.now(UTC)
    domains = [_domain_status(d, bands[d], depths, stored, skipped, now) for d in chosen]
    return {
        "depths_from": source,
        "domains": [asdict(s) for s in domains],
        "queues": [asdict(depths[q]) for q in extra if q in depths],
        "pages_per_second": round(sum(stored.recent.values()) / RATE_WINDOW, 2),
        "workers": found,
        "quality_alerts": alerts,
        "discovered": asdict(discovered_status(config, names, counts, depths, stored.layout, now)),
    }


def _domain_status(
    d: str,
    bands: list[str],
    depths: dict[str, QueueDepth],
    stored: _Stored,
    skipped: dict[str, int],
    now: datetime,
) -> DomainStatus:
    """One listed domain's status from what the broker, the database and Redis said."""
    ok, failed = stored.counts.get(d, (0, 0))
    found_bands = [depths[q] for q in bands if q in depths]
    depth = QueueDepth.of_bands(found_bands) if found_bands else QueueDepth("", 0, None, 0)
    backlog = stored.backlog.get(d)
    oldest = backlog.oldest if backlog is not None else None
    freshness = Freshness(
        backlog.due if backlog is not None else 0,
        round((now - oldest).total_seconds(), 1) if oldest is not None else None,
        stored.found.get(d, {}),
    )
    return DomainStatus(
        d,
        depth,
        ok,
        failed,
        round(stored.recent.get(d, 0) / RATE_WINDOW, 2),
        round(stored.credits.get(d, 0.0), 2),
        freshness,
        Sitemaps.of(stored.sitemaps.get(d, {})),
        skipped.get(d, 0),
    )


def _depth_cells(q: dict[str, Any]) -> list[str]:
    unacked = "?" if q["unacked"] is None else str(q["unacked"])
    return [str(q["ready"]), unacked, str(q["consumers"])]


def _queue_rows(data: dict[str, Any]) -> list[list[str]]:
    # Most crawls fetch directly and spend nothing, and crawl once: those columns appear only when
    # some domain paid, or has a schedule.
    paid = any(d.get("credits", 0) for d in data["domains"])
    fresh = any(_scheduled(d.get("freshness")) for d in data["domains"])
    mapped = any(d.get("sitemaps", {}).get("files") for d in data["domains"])
    # Subscriptions, not workers: a live worker holds none on a queue it paused, was halted on, or
    # (in burst mode) found drained; the summary line says so when no queue has one.
    head = ["queue", "ready", "unacked", "subscribed", "ok", "failed", "skipped", "pages/s"]
    extra = [*(["credits"] if paid else []), *(_FRESHNESS if fresh else []), *(_SITEMAPS if mapped else [])]
    rows = [[*head, *extra]]
    for d in data["domains"]:
        pages = [str(d["pages_ok"]), str(d["pages_failed"]), str(d["pages_skipped"])]
        rate = f"{d['pages_per_second']:.2f}"
        spent = [f"{d.get('credits', 0):g}"] if paid else []
        schedule = _freshness_cells(d["freshness"]) if fresh else []
        read = _sitemap_cells(d["sitemaps"]) if mapped else []
        rows.append([d["domain"], *_depth_cells(d["queue"]), *pages, rate, *spent, *schedule, *read])
    blank = [""] * (4 + len(extra))
    hosts = data.get("discovered")
    if _shows_hosts(hosts):
        # The discovered hosts' queues summed: a row per kind of queue, never one per host.
        for part in ("shards", "waits"):
            q = hosts[part]
            rows.append([f"{DISCOVERED_LABEL} ({q['name']})", *_depth_cells(q), *blank])
    for q in data["queues"]:
        rows.append([q["name"], *_depth_cells(q), *blank])
    return rows


def _shows_hosts(hosts: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    """Whether the status shows discovered hosts: discovery is on, or some crawl admitted hosts."""
    return bool(hosts and (hosts["follow"] or hosts["known"] or hosts.get("listed")))


def _hosts_line(data: dict[str, Any]) -> list[str]:
    """The discovered hosts in one line: how many in each state."""
    hosts = data.get("discovered")
    if not _shows_hosts(hosts):
        return []
    counts = ", ".join(f"{hosts[k]} {k}" for k in ("known", "active", "waiting", "parked"))
    listed = f"; the host layout serves {hosts['listed']} listed domains too" if hosts.get("listed") else ""
    due = ""
    if hosts.get("due"):
        due = (
            f"; {hosts['due']} of its pages due for a refresh, the oldest for {hosts['overdue_seconds']:.0f}s"
        )
    return [f"discovered hosts: {counts} (over {hosts['crawls']} crawl(s)){listed}{due}"]


def _top_rows(data: dict[str, Any]) -> list[list[str]]:
    """The discovered hosts with the most URLs queued, at most TOP_HOSTS of them."""
    hosts = data.get("discovered")
    if not _shows_hosts(hosts) or not hosts["top"]:
        return []
    return [["top host", "queued"], *([t["host"], str(t["queued"])] for t in hosts["top"])]


_FRESHNESS = ["due", "overdue", "changed", "unchanged", "gone"]
_SITEMAPS = ["sitemaps", "listed new", "dropped"]


def _sitemap_cells(s: dict[str, Any]) -> list[str]:
    """A domain's sitemap files read, the URLs they listed first, and those they listed but dropped."""
    return [str(s["files"]), str(s["discovered"]), str(sum(s["dropped"].values()))]


def _scheduled(freshness: dict[str, Any] | None) -> bool:
    """Whether a domain's pages are on a schedule: some due, or some refreshed."""
    return bool(freshness and (freshness["due"] or freshness["found"]))


def _freshness_cells(f: dict[str, Any]) -> list[str]:
    """A domain's schedule: due now, the oldest due's wait, and its pages as their last fetch found them."""
    found = f["found"]
    overdue = "-" if f["overdue_seconds"] is None else f"{f['overdue_seconds']:.0f}s"
    unchanged = found.get("not_modified", 0) + found.get("same_signature", 0)
    return [str(f["due"]), overdue, str(found.get("changed", 0)), str(unchanged), str(found.get("gone", 0))]


def _worker_rows(data: dict[str, Any]) -> list[list[str]]:
    rows = [["worker", "state", "last beat", "pages", "started", "domains"]]
    # Archives in object storage: a column only while some worker has files waiting or failing.
    uploads = any(w.get("archive_waiting") or w.get("archive_error") for w in data["workers"])
    if uploads:
        rows[0].append("archive uploads")
    for w in data["workers"]:
        beat = "-" if w["age"] is None else f"{w['age']:.1f}s ago"
        who = f"{w['host']} pid {w['pid']} ({w['role']})"
        rows.append([who, w["state"], beat, str(w["pages"]), w["started"], shown(w["domains"], 5, ",")])
        if uploads:
            rows[-1].append(_uploads_cell(w.get("archive_waiting", 0), w.get("archive_error", "")))
    return rows


def _uploads_cell(waiting: int, error: str) -> str:
    cell = f"{waiting} file(s) waiting" if waiting else "none waiting"
    return f"{cell}; last failed: {error[:80]}" if error else cell


_NUMBERS = {
    *("ready", "unacked", "subscribed", "ok", "failed", "skipped", "pages/s", "credits", "queued"),
    *("last beat", "pages"),
    *_FRESHNESS,
    *_SITEMAPS,
}


def _columns(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    right = [name in _NUMBERS for name in rows[0]]
    return "\n".join(
        "  ".join(
            cell.rjust(w) if r_ else cell.ljust(w) for cell, w, r_ in zip(r, widths, right, strict=True)
        ).rstrip()
        for r in rows
    )


def _summary(data: dict[str, Any]) -> str:
    states = [w["state"] for w in data["workers"]]
    counts = ", ".join(f"{states.count(s)} {s}" for s in ("live", "late", "gone") if s in states)
    unacked = "" if data["depths_from"] == "management" else " (unacked unknown: management API unreachable)"
    idle = ""
    if "live" in states and not any(d["queue"]["consumers"] for d in data["domains"]):
        idle = " (subscribed to no domain queue: paused, halted by the fetch service, or drained)"
    return f"{data['pages_per_second']:.2f} pages/s; workers: {counts or 'none'}{idle}{unacked}"


def render(data: dict[str, Any]) -> str:
    """The status as plain tables for a person."""
    parts = [_columns(_queue_rows(data)), "", _summary(data)]
    parts += _hosts_line(data)
    parts += _alert_lines(data)
    top = _top_rows(data)
    if top:
        parts += ["", _columns(top)]
    if data["workers"]:
        parts += ["", _columns(_worker_rows(data))]
    return "\n".join(parts)


def _alert_lines(data: dict[str, Any]) -> list[str]:
    """A line per coverage alert: a field's coverage fell (`crawler quality` shows the table)."""
    alerts = data.get("quality_alerts", [])
    return [f"! crawl {a['crawl']}: {a['message']} (crawler quality --crawl {a['crawl']})" for a in alerts]


def rich_tables(data: dict[str, Any]) -> Group:
    """The status as rich tables, for `crawler status --watch`; late and gone workers stand out."""
    queues = Table(title="\n".join([_summary(data), *_hosts_line(data)]), title_justify="left")
    head, *rows = _queue_rows(data)
    for name in head:
        queues.add_column(name, justify="right" if name in _NUMBERS else "left")
    for row in rows:
        queues.add_row(*row)
    parts: list[Table] = [queues]
    top = _top_rows(data)
    if top:
        hosts = Table(title="discovered hosts by URLs queued", title_justify="left")
        for name in top[0]:
            hosts.add_column(name, justify="right" if name in _NUMBERS else "left")
        for row in top[1:]:
            hosts.add_row(*row)
        parts.append(hosts)
    lines = _alert_lines(data)
    if lines:
        alerts = Table(title="data quality", title_justify="left", show_header=False)
        alerts.add_column("alert", style="bold red")
        for line in lines:
            alerts.add_row(line)
        parts.append(alerts)
    if data["workers"]:
        table = Table(title="workers", title_justify="left")
        head, *rows = _worker_rows(data)
        for name in head:
            table.add_column(name, justify="right" if name in _NUMBERS else "left")
        style = {"live": None, "late": "yellow", "gone": "bold red"}
        for row in rows:
            table.add_row(*row, style=style[row[1]])
        parts.append(table)
    return Group(*parts)


async def watch(settings: Settings, config: CrawlConfig, every: float, console: Console) -> None:
    """Refresh the status every `every` seconds until interrupted: a live table on a terminal."""
    with Database(settings.database_url) as database:
        async with connections.broker(settings.amqp_url, "crawler status") as connection:
            if not console.is_terminal:
                while True:
                    data = await status(settings, config, connection, database)
                    console.print(render(data), highlight=False, markup=False)
                    console.print()
                    await asyncio.sleep(every)
            with Live(console=console, auto_refresh=False) as live:
                while True:
                    live.update(
                        rich_tables(await status(settings, config, connection, database)), refresh=True
                    )
                    await asyncio.sleep(every)
