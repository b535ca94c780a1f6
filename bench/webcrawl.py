"""The real crawler on bench.web's loopback web: `crawler seed` h0, `crawler-consume --burst` workers
discovering the rest by links, then the issue's figures from the sink, nginx's log and the services.

    python -m bench.web --hosts 2000 --crawl [--processes 2]
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections import defaultdict
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import httpx
import redis
import yaml

from bench import services
from bench.politeness import Rate, Request, read_log, report
from bench.procs import Child, service_cpu, total_cpu
from bench.tools import _db_progress, _script, crawler_env
from bench.web import Running, WebSpec, page_links

HOST = Rate(1, 1)  # what a discovered host gets (discover.host), and the listed h0
PER_IP = Rate(4, 2)  # per_ip: eight hosts share an address
SAMPLE_EVERY = 1.0  # seconds between samples of progress, RSS and the services' memory
LATER_WORKERS = 200  # pages stored before the second worker (and any next) starts


def crawl_config(running: Running, *, host: Rate = HOST, per_ip: Rate = PER_IP) -> dict[str, Any]:
    """domains.yaml: h0 listed, every other host discovered, names through the web's dnsmasq."""
    spec = running.web.spec
    budget = {"rate": host.rate, "burst": host.burst}
    return {
        "defaults": {"max_depth": 50, "max_pages": 10, "sitemaps": False, **budget},
        # No resolve map: every name goes to dnsmasq, and the guard lets loopback alone through.
        "allow_networks": ["127.0.0.0/8"],
        "domains": {spec.name(0): {}},
        "discover": {
            "follow": "all",
            "allow": [".test"],
            "max_hosts": spec.hosts + 10,
            "max_hosts_per_domain": 4,
            "host": {**budget, "max_pages": 10, "max_depth": 50},
        },
        "dns": {"nameservers": [running.names.spelled]},
        "per_ip": {"rate": per_ip.rate, "burst": per_ip.burst},
    }


@dataclass(slots=True)
class Memory:
    """The shared services' memory, sampled: the largest rise over the first sample."""

    redis_before: int = 0
    rabbit_before: int = 0
    redis_peak: int = 0
    rabbit_peak: int = 0
    queues_peak: int = 0  # the crawl's vhost's queues' own memory
    at_peak: dict[str, tuple[int, int]] = field(default_factory=dict)  # per queue: memory, messages
    samples: list[tuple[float, int, int]] = field(default_factory=list)


def _redis_used(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def _rabbit(api: httpx.Client, vhost: str) -> tuple[int, dict[str, tuple[int, int]]]:
    """The broker node's mem_used, and each of the vhost's queues' memory and messages."""
    nodes = api.get("/api/nodes").json()
    queues = api.get(f"/api/queues/{vhost}").json()
    each = {str(q["name"]): (int(q.get("memory", 0)), int(q.get("messages", 0))) for q in queues}
    return sum(int(n.get("mem_used", 0)) for n in nodes), each


def _queue_kinds(each: dict[str, tuple[int, int]], prefix: str) -> dict[str, tuple[int, int, int]]:
    """The queues at the peak by kind (numbers folded): memory, messages, how many queues."""
    kinds: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for name, (b, n) in each.items():
        kind = re.sub(r"\d+(\.\d+)?", "N", name.removeprefix(prefix))
        kinds[kind][0] += b
        kinds[kind][1] += n
        kinds[kind][2] += 1
    return {k: (v[0], v[1], v[2]) for k, v in kinds.items()}


def _prefix_memory(client: redis.Redis, prefix: str) -> dict[str, tuple[int, int]]:
    """MEMORY USAGE of the crawl's keys, by key shape (hosts, addresses and numbers folded)."""
    groups: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    keys = list(client.scan_iter(f"{prefix}:*", count=5000))
    for i in range(0, len(keys), 1000):
        part = keys[i : i + 1000]
        pipe = client.pipeline(transaction=False)
        for k in part:
            pipe.memory_usage(k)
        for k, used in zip(part, pipe.execute(), strict=True):
            name = k.decode()[len(prefix) :]
            name = re.sub(r":c:[^:]+:", ":c:{crawl}:", name)
            name = re.sub(r"h\d+\.d\d+\.test", "{host}", name)
            name = re.sub(r"127\.\d+\.\d+\.\d+", "{ip}", name)
            name = re.sub(r"\d+", "N", name)
            groups[name][0] += 1
            groups[name][1] += int(used or 0)
    return {k: (v[0], v[1]) for k, v in groups.items()}


def _pages(db: Path) -> tuple[int, int, int, int]:
    """Pages stored, those answered 200, the hosts they are on, the pages by their failure."""
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
        total, ok, hosts = conn.execute(
            "SELECT count(*), sum(error IS NULL AND status_code = 200), count(DISTINCT domain) FROM pages"
        ).fetchone()
        failed = conn.execute("SELECT count(*) FROM pages WHERE error IS NOT NULL").fetchone()[0]
    return int(total), int(ok or 0), int(hosts), int(failed)


def discovery_delays(spec: WebSpec, requests: Sequence[Request]) -> list[float]:
    """Per host but h0, seconds from the first request for a page linking to it (its discovery, as
    nginx saw the request) to its own first request (its robots.txt, usually)."""
    first: dict[tuple[str, str], float] = {}
    first_host: dict[str, float] = {}
    for r in requests:
        if r.status == 200:
            key = (r.host, "/" if r.path == "/" else "/p/")
            first[key] = min(first.get(key, r.time), r.time)
        first_host[r.host] = min(first_host.get(r.host, r.time), r.time)
    found: dict[int, float] = {}
    for i in range(spec.hosts):
        if (t := first.get((spec.name(i), "/"))) is not None:
            for c in spec.children(i):
                found[c] = min(found.get(c, t), t)
    for i, away in enumerate(page_links(spec)):
        if (t := first.get((spec.name(i), "/p/"))) is not None:
            for c in away:
                found[c] = min(found.get(c, t), t)
    return sorted(
        max(0.0, first_host[spec.name(c)] - t) for c, t in found.items() if c and spec.name(c) in first_host
    )


def _pct(values: Sequence[float], q: float) -> float:
    return values[min(len(values) - 1, int(len(values) * q))] if values else float("nan")


def crawl(running: Running, work: Path, *, processes: int, timeout: float) -> None:
    """Crawl the web from h0 with `processes` burst workers, and print the figures."""
    spec = running.web.spec
    out = work / "crawl"
    out.mkdir(parents=True, exist_ok=True)
    config = out / "domains.yaml"
    config.write_text(yaml.safe_dump(crawl_config(running)))
    db = out / "crawl.db"
    client = redis.Redis.from_url(services.REDIS_URL)
    api = httpx.Client(base_url=services.MANAGEMENT, auth=services.AUTH, timeout=30, trust_env=False)
    with ExitStack() as stack:
        stack.callback(client.close)
        stack.callback(api.close)
        env = crawler_env(stack, config, db, "bench-webcrawl-")
        vhost = unquote(urlsplit(env["CRAWLER_AMQP_URL"]).path.lstrip("/"))
        prefix = env["CRAWLER_PREFIX"]
        mem = Memory(redis_before=_redis_used(client))
        mem.rabbit_before, _ = _rabbit(api, vhost)
        services_before = service_cpu()
        nginx_before = total_cpu(running.server.pids())
        started = time.time()
        children: list[Child] = []
        with (out / "seed.log").open("wb") as log:
            seed = Child.start("seed", [*_script("crawler"), "seed", spec.url(0)], env, log)
            children.append(seed)
            seed.wait()
        consumers: list[Child] = []

        def consume() -> None:
            i = len(consumers)
            log = stack.enter_context((out / f"consume-{i}.log").open("wb"))
            consumers.append(Child.start(f"consume {i}", [*_script("crawler-consume"), "--burst"], env, log))
            children.append(consumers[-1])

        # A burst worker stops when the queues hold nothing ready, unacked deliveries of another worker
        # aside: with one seed the others would stop at once, so they start once the hosts are many.
        consume()
        progress = _db_progress(db)
        shown = 0.0
        while any(c.poll() for c in consumers):
            now = time.time()
            done = progress()
            if len(consumers) < processes and done >= LATER_WORKERS:
                for _ in range(processes - len(consumers)):
                    consume()
            for c in consumers:
                c.sample(done)
            used = _redis_used(client) - mem.redis_before
            node, each = _rabbit(api, vhost)
            queues = sum(m for m, _ in each.values())
            mem.redis_peak = max(mem.redis_peak, used)
            mem.rabbit_peak = max(mem.rabbit_peak, node - mem.rabbit_before)
            if queues > mem.queues_peak:
                mem.queues_peak, mem.at_peak = queues, each
            mem.samples.append((now - started, used, node - mem.rabbit_before))
            if now - shown >= 10:
                shown = now
                rss = sum(c.rss[-1][1] for c in consumers if c.rss)
                print(
                    f"  {now - started:5.0f} s: {done:,} pages; workers {rss:.0f} MB, "
                    f"Redis +{used / 1e6:.1f} MB, "
                    f"RabbitMQ +{(node - mem.rabbit_before) / 1e6:.1f} MB (queues {queues / 1e6:.1f} MB)",
                    flush=True,
                )
            if now - started > timeout:
                print(f"timed out after {timeout:.0f} s: killed")
                for c in consumers:
                    c.kill()
                break
            time.sleep(SAMPLE_EVERY)
        for c in consumers:
            c.wait()
        wall = time.time() - started
        cpu = {"workers": sum(c.cpu for c in children)}
        after = service_cpu()
        cpu.update({k: after[k] - services_before[k] for k in after})
        cpu["nginx"] = total_cpu(running.server.pids()) - nginx_before
        redis_end = _redis_used(client) - mem.redis_before
        keys = _prefix_memory(client, prefix)
        exits = [c.proc.returncode for c in consumers]
    total, ok, hosts, failed = _pages(db)
    requests = read_log(running.web.log)
    last = max((r.time for r in requests), default=started)
    took = last - started
    print(f"\ncrawl of {spec.hosts:,} hosts from h0, {processes} workers (exits {exits}), SQLite:")
    print(
        f"{total:,} pages stored ({ok:,} answered 200, {failed} failed) on {hosts:,} hosts, "
        f"{len(requests):,} requests in nginx's log"
    )
    print(
        f"seed to the last request: {took:.1f} s ({wall:.1f} s to the workers' exit): "
        f"{ok / took:.1f} pages/s, {hosts / took:.1f} hosts discovered and crawled a second"
    )
    for slack in (0.05, 0.02):
        print(report(requests, host=HOST, ip=PER_IP, slack=slack, top=3))
    delays = discovery_delays(spec, requests)
    print(
        f"discovery (first request for a page linking to it) to the host's first request, {len(delays):,} "
        f"hosts: p50 {_pct(delays, 0.5):.2f} s, p90 {_pct(delays, 0.9):.2f} s, "
        f"p99 {_pct(delays, 0.99):.2f} s, "
        f"max {delays[-1] if delays else float('nan'):.2f} s"
    )
    rss_peak = [c.peak_rss_mb for c in consumers]
    rss_first = [c.rss[0][1] for c in consumers if c.rss]
    rss_last = [c.rss[-1][1] for c in consumers if c.rss]
    print(
        f"workers' RSS: first sample {sum(rss_first):.0f} MB, last {sum(rss_last):.0f} MB, "
        f"peak {sum(rss_peak):.0f} MB ({' + '.join(f'{m:.0f}' for m in rss_peak)})"
    )
    per_host = 1000 / max(hosts, 1)
    seen = sum(b for k, (_, b) in keys.items() if ":seen" in k or "seen" in k.split(":")[-1])
    crawl_bytes = sum(b for _, b in keys.values())
    print(
        f"Redis: used_memory +{redis_end / 1e6:.1f} MB at the end (peak +{mem.redis_peak / 1e6:.1f} MB; a "
        f"shared server); the crawl's keys {crawl_bytes / 1e6:.1f} MB, {crawl_bytes / 1e3 * per_host:.0f} "
        f"B a host, URL dedup aside {(crawl_bytes - seen) / 1e3 * per_host:.0f} B a host"
    )
    for name, (n, b) in sorted(keys.items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"  {name}: {n:,} keys, {b / 1e6:.2f} MB")
    print(
        f"RabbitMQ: node mem_used peak +{mem.rabbit_peak / 1e6:.1f} MB (a shared broker), the vhost's queues "
        f"peak {mem.queues_peak / 1e6:.2f} MB, {mem.queues_peak / 1e3 * per_host:.0f} B a host"
    )
    kinds = sorted(_queue_kinds(mem.at_peak, prefix).items(), key=lambda kv: -kv[1][0])
    for kind, (b, n, count) in kinds[:6]:
        print(f"  {kind}: {count} queue(s), {b / 1e6:.2f} MB, {n:,} messages, {b / max(n, 1):,.0f} B each")
    print(
        f"CPU: workers {cpu['workers']:.1f} s ({1000 * cpu['workers'] / max(ok, 1):.2f} ms a page), "
        + ", ".join(f"{k} {1000 * v / max(ok, 1):.2f} ms/p" for k, v in cpu.items() if k != "workers")
    )
