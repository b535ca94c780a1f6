"""A loopback web of N hosts for crawling the open web: names in dnsmasq, pages in one nginx.

Host i is `h{i}.d{i // DOMAIN_HOSTS}.test` (a few hosts per registered domain), on the address
127.x.y.z shared by `per_ip` hosts in a row, so politeness per IP matters. One nginx listens on every
address and answers by Host: an index linking to the host's own pages and to `links` hosts further on
(host i to LINKS*i+1 .. LINKS*i+LINKS, a tree every host of which a crawl from h0 reaches), and pages
linking to two hosts drawn at random. Its access log records, per request, the time, the Host, the
address connected to and the client's, which bench.politeness reads.

    python -m bench.web [--hosts 100000] [--per-ip 8] [--sample 2000]
    python -m bench.web --hosts 10000 --crawl [--processes 2]   # the crawler on it (bench.webcrawl)
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import random
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp
from redis.asyncio import Redis

from bench import dnsmasq, nginx
from bench.politeness import Rate, read_log, report
from bench.procs import rss_mb
from bench.services import REDIS_URL, key_prefix
from crawler.dns import HostResolver
from crawler.fetch.connect import AddressPolicy, GuardedBackend, GuardedResolver
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.names import Names
from crawler.openweb import DnsConfig
from demo.site import free_port

T = TypeVar("T")
R = TypeVar("R")

DOMAIN_HOSTS = 4  # hosts per registered domain: h0.d0.test .. h3.d0.test
LINKS = 4
RANDOM_LINKS = 2
# The sample's budgets: per host, and per address (eight hosts share one).
HOST_RATE, IP_RATE = Rate(2, 1), Rate(4, 2)
LATE = 0.002  # seconds: a request later than this on the wire is counted when it went
# One line a request: when it was logged and how long it took (its arrival is the one less the
# other; s, ms resolution), the Host asked for, the address connected to, the client's, the status
# and the path.
LOG_FORMAT = (
    "log_format politeness '$msec $request_time $host $server_addr $remote_addr $status $request_uri';"
)


@dataclass(frozen=True, slots=True)
class WebSpec:
    """The shape of a loopback web."""

    hosts: int
    per_ip: int = 8  # hosts sharing one address
    pages: int = 3  # per host: the index and pages-1 more
    port: int = 8080
    seed: int = 45

    def name(self, i: int) -> str:
        """Host i's name."""
        return f"h{i}.d{i // DOMAIN_HOSTS}.test"

    def address(self, i: int) -> str:
        """Host i's address: 127.1.0.1 for the first `per_ip` hosts, and so on (no .0 or .255)."""
        n = i // self.per_ip
        z = n % 254 + 1
        n //= 254
        return f"127.{n // 256 + 1}.{n % 256}.{z}"

    @property
    def addresses(self) -> int:
        """How many distinct addresses the hosts have."""
        return (self.hosts + self.per_ip - 1) // self.per_ip

    def url(self, i: int, path: str = "/") -> str:
        """A URL on host i."""
        return f"http://{self.name(i)}:{self.port}{path}"

    def children(self, i: int) -> list[int]:
        """The hosts host i's index links to."""
        return [c for c in range(LINKS * i + 1, LINKS * i + LINKS + 1) if c < self.hosts]


@dataclass(frozen=True, slots=True)
class Web:
    """A generated web on disk: its dnsmasq hosts file and its nginx.conf."""

    spec: WebSpec
    directory: Path
    hosts_file: Path
    nginx_conf: str
    log: Path


def _index(spec: WebSpec, i: int) -> str:
    own = "".join(f"<a href='/p/{p}'>page {p}</a>" for p in range(1, spec.pages))
    away = "".join(f"<a href='{spec.url(c)}'>{spec.name(c)}</a>" for c in spec.children(i))
    return f"{own}{away}"


def page_links(spec: WebSpec) -> list[list[int]]:
    """The hosts each host's pages (other than its index) link to, drawn at random."""
    rng = random.Random(spec.seed)
    return [rng.sample(range(spec.hosts), RANDOM_LINKS) for _ in range(spec.hosts)]


def _page(spec: WebSpec, away: Sequence[int]) -> str:
    return "".join(f"<a href='{spec.url(h)}'>elsewhere</a>" for h in away)


def generate(spec: WebSpec, directory: Path) -> Web:
    """Write the hosts file and the nginx.conf of the web under `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    hosts_file = directory / "hosts"
    with hosts_file.open("w") as out:
        for i in range(spec.hosts):
            out.write(f"{spec.address(i)} {spec.name(i)}\n")
    index = "\n".join(f'        {spec.name(i)} "{_index(spec, i)}";' for i in range(spec.hosts))
    links = page_links(spec)
    page = "\n".join(f'        {spec.name(i)} "{_page(spec, links[i])}";' for i in range(spec.hosts))
    listens = "\n".join(
        f"        listen {spec.address(i)}:{spec.port};" for i in range(0, spec.hosts, spec.per_ip)
    )
    head = "<!doctype html><html><head><title>$host</title></head><body><h1>$host"
    servers = f"""    map_hash_max_size {max(4096, 4 * spec.hosts)};
    map_hash_bucket_size 128;
    map $host $index_links {{
        default "";
{index}
    }}
    map $host $page_links {{
        default "";
{page}
    }}
    server {{
{listens}
        server_name _;
        default_type text/html;
        if ($index_links = "") {{ return 404; }}
        location = /robots.txt {{ default_type text/plain; return 200 "User-agent: *\\nAllow: /\\n"; }}
        location = / {{ return 200 "{head}</h1>$index_links</body></html>"; }}
        location ~ ^/p/([0-9]+)$ {{ return 200 "{head} page $1</h1>$page_links</body></html>"; }}
        location / {{ return 404; }}
    }}"""
    log = directory / "access.log"
    log.unlink(missing_ok=True)  # a run reads its own requests alone
    conf = nginx.frame(
        servers,
        directory / "nginx",
        connections=spec.addresses + 8192,
        open_files=16,
        access_log=log,
        log_format=LOG_FORMAT,
    )
    return Web(spec, directory, hosts_file, conf, log)


@dataclass(frozen=True, slots=True)
class Running:
    """A web being served: its name server and its nginx."""

    web: Web
    names: dnsmasq.NameServer
    server: nginx.Nginx


@contextmanager
def serve(web: Web, *, dns_address: str = "127.0.0.53", log_queries: bool = False) -> Iterator[Running]:
    """Run the web's dnsmasq and nginx until the block ends."""
    spec = web.spec
    # nginx is up once it answers on its first and last address (it binds every one before serving).
    probes = [(spec.address(0), spec.port), (spec.address(spec.hosts - 1), spec.port)]
    with ExitStack() as stack:
        names = stack.enter_context(
            dnsmasq.serve(
                web.directory / "dnsmasq",
                web.hosts_file,
                address=dns_address,
                ttl=3600,
                cache_size=0,
                log_queries=log_queries,
            )
        )
        server = stack.enter_context(nginx.run(web.nginx_conf, probes, web.directory / "nginx"))
        yield Running(web, names, server)


async def _sample(running: Running, sample: Sequence[int]) -> None:
    """Resolve the sample through the fleet's cache (cold, then warm), fetch its hosts politely
    (half counting each request when its tokens were due, half when it reached the wire), and read
    nginx's log."""
    spec = running.web.spec
    config = DnsConfig.model_validate({"nameservers": [running.names.spelled], "timeout": 5})
    redis = Redis.from_url(REDIS_URL, max_connections=1024)
    with key_prefix("bench-web-") as prefix:
        try:
            names = Names(prefix)
            hosts = [spec.name(i) for i in sample]
            for label, resolver in (
                ("cold (dnsmasq, then Redis)", HostResolver(redis, names, config)),
                ("warm (another worker: Redis)", HostResolver(redis, names, config)),
            ):
                started = time.perf_counter()
                answers = await _gather(resolver.resolve, hosts, 64)
                took = time.perf_counter() - started
                print(
                    f"resolve {len(hosts)} hosts, {label}: {len(hosts) / took:,.0f}/s, "
                    f"lookups {resolver.lookups}"
                )
            started = time.perf_counter()
            await _gather(resolver.resolve, hosts, 64)
            took = time.perf_counter() - started
            print(f"resolve {len(hosts)} hosts, warm (this worker's own memory): {len(hosts) / took:,.0f}/s")
            wrong = [
                h
                for h, a, i in zip(hosts, answers, sample, strict=True)
                if str(a.addresses[0]) != spec.address(i)
            ]
            assert not wrong, f"dnsmasq answered wrong addresses for {wrong[:5]}"
            usage = [await redis.memory_usage(names.dns_key(h)) or 0 for h in hosts[:200]]
            print(f"Redis per cached host: {sum(usage) / len(usage):.0f} B")

            limiter = RateLimiter(redis, names)
            half = len(sample) // 2
            await _polite(running, resolver, limiter, sample[:half], went_late=False)
            await _polite(running, resolver, limiter, sample[half:], went_late=True)
        finally:
            await redis.aclose()
    requests = read_log(running.web.log)
    for label, part in (("grants only", sample[:half]), ("grants + went_late", sample[half:])):
        names_of = {spec.name(i) for i in part}
        mine = [r for r in requests if r.host in names_of]
        print(f"{label}:")
        for slack in (0.02, 0.05):
            print(report(mine, host=HOST_RATE, ip=IP_RATE, slack=slack, top=0))


async def _polite(
    running: Running, resolver: HostResolver, limiter: RateLimiter, sample: Sequence[int], *, went_late: bool
) -> None:
    """Fetch two pages of each host, each after its host's token and its address's; with
    `went_late`, a request that reached the wire late is counted then (RateLimiter.went_late)."""
    spec = running.web.spec
    guard = GuardedBackend(
        {}, AddressPolicy(allow_networks=[ipaddress.ip_network("127.0.0.0/8")]), resolver=resolver
    )
    sent: dict[str, float] = {}

    async def on_sent(_: object, __: object, params: aiohttp.TraceRequestHeadersSentParams) -> None:
        sent[str(params.url)] = time.time()

    trace = aiohttp.TraceConfig()
    trace.on_request_headers_sent.append(on_sent)
    connector = aiohttp.TCPConnector(limit=256, resolver=GuardedResolver(guard), use_dns_cache=False)
    host_budget = Budget(HOST_RATE.rate, HOST_RATE.burst, 60)
    ok, lates = 0, list[float]()

    async def visit(i: int) -> None:
        nonlocal ok
        name = spec.name(i)
        for path in ("/", "/p/1"):
            ip = (str((await resolver.resolve(name)).addresses[0]), Budget(IP_RATE.rate, IP_RATE.burst, 60))
            asked = time.time()
            waited = await limiter.acquire(name, lambda: host_budget, ip=ip)
            url = spec.url(i, path)
            async with session.get(url) as answer:
                await answer.read()
                ok += answer.status == 200
            late = sent[url] - (asked + waited)  # after its tokens were due
            lates.append(late)
            if went_late and late > LATE:
                await limiter.went_late(name, host_budget, late, ip=ip)

    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, trace_configs=[trace]) as session:
        await _gather(visit, sample, 64)
    took = time.perf_counter() - started
    lates.sort()
    print(
        f"fetch {2 * len(sample)} pages of {len(sample)} hosts{' with went_late' if went_late else ''}: "
        f"{ok} answered 200, {2 * len(sample) / took:,.0f} pages/s; on the wire after the tokens were due: "
        f"p50 {lates[len(lates) // 2] * 1000:.0f} ms, p99 {lates[int(len(lates) * 0.99)] * 1000:.0f} ms"
    )


async def _gather(step: Callable[[T], Awaitable[R]], items: Sequence[T], width: int) -> list[R]:
    """step(item) for every item, `width` at a time, the results in order."""
    results: dict[int, R] = {}
    todo = iter(enumerate(items))

    async def worker() -> None:
        for n, item in todo:
            results[n] = await step(item)

    await asyncio.gather(*(worker() for _ in range(width)))
    return [results[n] for n in range(len(items))]


def main(argv: Sequence[str] | None = None) -> None:
    """Generate the web, serve it, and show dnsmasq and nginx answering a sample."""
    parser = argparse.ArgumentParser(prog="python -m bench.web", description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument("--per-ip", type=int, default=8)
    parser.add_argument("--sample", type=int, default=2000, help="hosts resolved and fetched")
    parser.add_argument("--port", type=int, default=0, help="nginx's port (default: a free one)")
    parser.add_argument("--work", type=Path, default=None, help="directory (default: a temporary one)")
    parser.add_argument("--crawl", action="store_true", help="crawl it from h0 instead of the sample")
    parser.add_argument("--processes", type=int, default=2, help="crawler-consume workers (--crawl)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds before the crawl is killed")
    args = parser.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-web-"))
    port = args.port or free_port("127.1.0.1")
    spec = WebSpec(hosts=args.hosts, per_ip=args.per_ip, port=port)
    try:
        started = time.perf_counter()
        web = generate(spec, work)
        sizes = sum(p.stat().st_size for p in (web.hosts_file,)) + len(web.nginx_conf)
        print(
            f"generate {spec.hosts:,} hosts on {spec.addresses:,} addresses: "
            f"{time.perf_counter() - started:.1f} s, {sizes / 1e6:.1f} MB of files"
        )
        started = time.perf_counter()
        with serve(web) as running:
            print(
                f"dnsmasq and nginx up: {time.perf_counter() - started:.1f} s; RSS dnsmasq "
                f"{rss_mb(running.names.pid):.0f} MB, "
                f"nginx {sum(rss_mb(p) or 0 for p in running.server.pids()):.0f} MB"
            )
            if args.crawl:
                from bench.webcrawl import crawl  # it builds on this module

                crawl(running, work, processes=args.processes, timeout=args.timeout)
            else:
                sample = random.Random(1).sample(range(spec.hosts), min(args.sample, spec.hosts))
                asyncio.run(_sample(running, sample))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
