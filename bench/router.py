"""Router throughput: persistent, confirmed publishes per second from one process, through crawler.router.

python -m bench.router [--urls N] [--what-if] [--loop uvloop|asyncio]

Five ways, each on distinct URLs of the bench site's 4 hosts (so 4 domain queues of 10 priority
levels), into a fresh vhost and key prefix:
- `route x1`: one page's links (a batch of 40) at a time, as one page's handler does;
- `route x16`: 16 such batches at once, as a consumer with many pages in flight does;
- `aio-pika only x16`: the same messages published one by one with aio-pika's `exchange.publish`
  (no canonicalising, no Redis), as the router did before crawler.publisher;
- `publisher only x1`, `x16`: the same batches through crawler.publisher alone: the ceilings of
  `route x1` (the broker's confirm latency, a batch at a time) and `route x16`.

With --what-if, what the broker's side costs, each through crawler.publisher x16 into queues of its
own bound to an exchange of its own as the domain queues are: 1 queue instead of 4, 5 or 2 priority
levels instead of 10, no priority at all, and transient messages. The routed messages are counted in
their queues after every way (a mismatch is reported) and purged, so every way starts on empty queues.
The broker is shared: its CPU while the bench is not running (before and after) is taken as others'
and subtracted in the `- others` column.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from aio_pika import DeliveryMode, ExchangeType
from aio_pika.abc import AbstractChannel, AbstractExchange

from bench import services
from bench.procs import service_cpu
from bench.site import SiteSpec
from bench.tools import crawler_config
from crawler.config import CrawlConfig, parse_config
from crawler.frontier.client import frontier
from crawler.frontier.exchanges import declare, topology
from crawler.frontier.message import CrawlMessage, persistent
from crawler.frontier.publisher import Outgoing, Publisher
from crawler.frontier.quota import PageQuota
from crawler.frontier.router import Router
from crawler.frontier.urls import fingerprint, host_of
from crawler.names import MAX_PRIORITY
from crawler.settings import Settings

BATCH = 40  # links per page on the bench site
PRIORITY = 5  # what the router gives the bench's links (the default domain priority, depth 1)


@dataclass(frozen=True, slots=True)
class Measured:
    """One way of publishing, measured."""

    label: str
    publishes: int
    seconds: float
    cpu: float  # this process, user + system
    rabbitmq_cpu: float
    redis_cpu: float
    queued: int  # messages found in the way's queues afterwards

    def row(self, rabbitmq_background: float) -> str:
        """One line of the report; `rabbitmq_background` is others' use of the broker, in cores."""
        rate = self.publishes / self.seconds
        per = 1000 / self.publishes
        net = self.rabbitmq_cpu - rabbitmq_background * self.seconds
        return (
            f"{self.label:<22} {self.publishes:>7} {self.seconds:>8.2f} {rate:>10.0f}"
            f" {self.cpu * per:>12.3f} {self.rabbitmq_cpu * per:>12.3f} {net * per:>10.3f}"
            f" {self.rabbitmq_cpu / self.seconds:>8.2f} {self.redis_cpu * per:>9.3f}"
        )


HEADER = (
    f"{'way':<22} {'publishes':>7} {'seconds':>8} {'publish/s':>10}"
    f" {'proc ms/pub':>12} {'rabbit ms/pub':>12} {'- others':>10} {'rabbit cores':>8} {'redis ms/pub':>9}"
)
BACKGROUND_SECONDS = 3.0


def background() -> dict[str, float]:
    """The shared services' CPU use, in cores, while this bench is not running (others' load)."""
    before = service_cpu()
    time.sleep(BACKGROUND_SECONDS)
    after = service_cpu()
    return {k: (after[k] - before[k]) / BACKGROUND_SECONDS for k in after}


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


Send = Callable[[list[str]], Awaitable[int]]


@dataclass(frozen=True, slots=True)
class Way:
    """A way of publishing and the queues its messages end in."""

    label: str
    concurrency: int
    send: Send
    channel: AbstractChannel
    queues: tuple[str, ...]


async def _count_and_purge(way: Way) -> int:
    queued = 0
    for name in way.queues:
        queue = await way.channel.get_queue(name, ensure=False)
        purged = await queue.purge()
        queued += purged.message_count or 0
    return queued


async def _measure(way: Way, batches: Sequence[list[str]]) -> Measured:
    queue = list(reversed(batches))
    sent = 0

    async def worker() -> None:
        nonlocal sent
        while queue:
            done = await way.send(queue.pop())
            sent += done  # not `sent += await ...`: that reads `sent` before the await

    services_before, cpu_before, started = service_cpu(), _cpu(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(way.concurrency)))
    seconds, cpu, services_after = time.monotonic() - started, _cpu() - cpu_before, service_cpu()
    return Measured(
        way.label,
        sent,
        seconds,
        cpu,
        services_after["rabbitmq"] - services_before["rabbitmq"],
        services_after["redis"] - services_before["redis"],
        await _count_and_purge(way),
    )


def _batches(spec: SiteSpec, start: int, count: int) -> list[list[str]]:
    # Distinct URLs round-robin over the hosts, so every publish is new to the dedup store.
    urls = [f"{spec.origin(spec.hosts[i % len(spec.hosts)])}/p/{i}.html" for i in range(start, start + count)]
    return [urls[i : i + BATCH] for i in range(0, len(urls), BATCH)]


class _Transient(Publisher):
    delivery_mode = DeliveryMode.NOT_PERSISTENT


def _through(publisher: Publisher) -> Send:
    async def send(batch: list[str]) -> int:
        messages = [Outgoing(host_of(u), CrawlMessage(u, 1).encode(), PRIORITY) for u in batch]
        outcomes = await publisher.publish(messages)
        if any(o is not None for o in outcomes):
            raise RuntimeError(f"publishes not confirmed: {outcomes}")
        return len(batch)

    return send


async def _what_if(
    channel: AbstractChannel, prefix: str, label: str, queues: int, levels: int | None, mode: DeliveryMode
) -> Way:
    """A topic exchange and `queues` queues splitting the bench's hosts among them."""
    spec = SiteSpec()
    exchange = await channel.declare_exchange(f"{prefix}.{label}", ExchangeType.TOPIC, durable=True)
    names = []
    arguments: dict[str, Any] = {} if levels is None else {"x-max-priority": levels - 1}
    for n in range(queues):
        queue = await channel.declare_queue(f"{prefix}.{label}.{n}", durable=True, arguments=arguments)
        for host in spec.hosts[n::queues]:
            await queue.bind(exchange, f"#.{host}")  # as a domain queue is bound
        names.append(queue.name)
    publisher = Publisher(exchange) if mode == DeliveryMode.PERSISTENT else _Transient(exchange)
    return Way(label, 16, _through(publisher), channel, tuple(names))


async def bench(urls: int, what_if: bool = False) -> list[Measured]:
    """Measure the five ways (eleven with `what_if`), `urls` publishes each."""
    spec = SiteSpec()
    config: CrawlConfig = parse_config(yaml.safe_dump(crawler_config(spec)), "bench")
    results = []
    with services.vhost() as amqp_url, services.key_prefix("routerbench") as prefix:
        settings = Settings(amqp_url=amqp_url, redis_url=services.REDIS_URL, prefix=prefix)
        async with frontier(settings, "bench router") as f:
            channel = await f.connection.channel(publisher_confirms=True)
            await declare(channel, topology(config, settings.names))
            exchange: AbstractExchange = await channel.get_exchange(settings.names.frontier, ensure=False)
            router = Router(config, exchange, f.seen, PageQuota(f.redis, settings.names))
            domain_queues = tuple(settings.names.domain_queue(d) for d in sorted(config.domains))

            async def route(batch: list[str]) -> int:
                routed = await router.route(batch, depth=1, claimant=fingerprint(batch[0]))
                return len(routed.published)

            async def aio_pika_only(batch: list[str]) -> int:
                await asyncio.gather(
                    *(
                        exchange.publish(
                            persistent(CrawlMessage(u, 1).encode(), PRIORITY), routing_key=host_of(u)
                        )
                        for u in batch
                    )
                )
                return len(batch)

            ways = [
                Way("route x1", 1, route, channel, domain_queues),
                Way("route x16", 16, route, channel, domain_queues),
                Way("aio-pika only x16", 16, aio_pika_only, channel, domain_queues),
                Way("publisher only x1", 1, _through(Publisher(exchange)), channel, domain_queues),
                Way("publisher only x16", 16, _through(Publisher(exchange)), channel, domain_queues),
            ]
            if what_if:
                persistent_, transient = DeliveryMode.PERSISTENT, DeliveryMode.NOT_PERSISTENT
                for label, queues, levels, mode in [
                    ("4 queues, 10 levels", 4, MAX_PRIORITY + 1, persistent_),
                    ("1 queue, 10 levels", 1, MAX_PRIORITY + 1, persistent_),
                    ("4 queues, 5 levels", 4, 5, persistent_),
                    ("4 queues, 2 levels", 4, 2, persistent_),
                    ("4 queues, no priority", 4, None, persistent_),
                    ("no priority, transient", 4, None, transient),
                ]:
                    ways.append(await _what_if(channel, prefix, label, queues, levels, mode))
            for n, way in enumerate(ways):
                results.append(await _measure(way, _batches(spec, n * urls, urls)))
            await channel.close()
    return results


def _runner(loop: str) -> Callable[[Coroutine[Any, Any, list[Measured]]], list[Measured]]:
    if loop == "uvloop":
        import uvloop

        return uvloop.run
    return asyncio.run


def main(argv: Sequence[str] | None = None) -> None:
    """Run the router bench and print its table."""
    parser = argparse.ArgumentParser(prog="python -m bench.router", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=20_000, help="publishes per way (default %(default)s)")
    parser.add_argument(
        "--what-if", action="store_true", help="also: fewer queues, priority levels; transient"
    )
    parser.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="event loop (default %(default)s, as the crawler's processes run)",
    )
    args = parser.parse_args(argv)
    before = background()
    results = _runner(args.loop)(bench(args.urls, args.what_if))
    after = background()
    others = {k: (before[k] + after[k]) / 2 for k in before}
    print(
        "others' CPU on the shared services, before and after the run: "
        + ", ".join(f"{k} {before[k]:.2f} and {after[k]:.2f} cores" for k in ("rabbitmq", "redis"))
    )
    print(HEADER)
    for r in results:
        print(r.row(others["rabbitmq"]))
    for r in results:
        if r.queued != r.publishes:
            print(f"note: {r.label}: {r.publishes} confirmed but {r.queued} found in its queues")


if __name__ == "__main__":
    main()
