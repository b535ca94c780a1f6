"""Router throughput: persistent, confirmed publishes per second from one process, through crawler.router.

python -m bench.router [--urls N]

Three ways, each on distinct URLs of the bench site's hosts, into a fresh vhost and key prefix:
- `route x1`: one page's links (a batch of 40) at a time, as one page's handler does;
- `route x16`: 16 such batches at once, as a consumer with many pages in flight does;
- `publish only x16`: the same publishes straight to the exchange (no canonicalising, no Redis),
  the ceiling that aio-pika and the broker allow.

With --what-if, two more: `plain queue x16` publishes the same way to a durable queue without
x-max-priority, and `transient x16` sends non-persistent messages to it: what those choices cost.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import yaml
from aio_pika import DeliveryMode, ExchangeType
from aio_pika.abc import AbstractExchange

from bench import services
from bench.procs import service_cpu
from bench.site import SiteSpec
from bench.tools import crawler_config
from crawler.config import CrawlConfig, parse_config
from crawler.crawl import frontier
from crawler.exchanges import declare, topology
from crawler.message import CrawlMessage, persistent
from crawler.quota import PageQuota
from crawler.router import Router
from crawler.settings import Settings
from crawler.urls import fingerprint, host_of

BATCH = 40  # links per page on the bench site


@dataclass(frozen=True, slots=True)
class Measured:
    """One way of publishing, measured."""

    label: str
    publishes: int
    seconds: float
    cpu: float  # this process, user + system
    rabbitmq_cpu: float
    redis_cpu: float

    def row(self) -> str:
        """One line of the report."""
        rate = self.publishes / self.seconds
        per = 1000 / self.publishes
        return (
            f"{self.label:<18} {self.publishes:>7} {self.seconds:>8.2f} {rate:>10.0f}"
            f" {self.cpu * per:>12.3f} {self.rabbitmq_cpu * per:>12.3f} {self.redis_cpu * per:>9.3f}"
        )


HEADER = (
    f"{'way':<18} {'publishes':>7} {'seconds':>8} {'publish/s':>10}"
    f" {'proc ms/pub':>12} {'rabbit ms/pub':>12} {'redis ms/pub':>9}"
)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measure(
    label: str, batches: Sequence[list[str]], concurrency: int, send: Callable[[list[str]], Awaitable[int]]
) -> Measured:
    queue = list(reversed(batches))
    sent = 0

    async def worker() -> None:
        nonlocal sent
        while queue:
            done = await send(queue.pop())
            sent += done  # not `sent += await ...`: that reads `sent` before the await

    services_before, cpu_before, started = service_cpu(), _cpu(), time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds, cpu, services_after = time.monotonic() - started, _cpu() - cpu_before, service_cpu()
    return Measured(
        label,
        sent,
        seconds,
        cpu,
        services_after["rabbitmq"] - services_before["rabbitmq"],
        services_after["redis"] - services_before["redis"],
    )


def _batches(spec: SiteSpec, start: int, count: int) -> list[list[str]]:
    # Distinct URLs round-robin over the hosts, so every publish is new to the dedup store.
    urls = [f"{spec.origin(spec.hosts[i % len(spec.hosts)])}/p/{i}.html" for i in range(start, start + count)]
    return [urls[i : i + BATCH] for i in range(0, len(urls), BATCH)]


async def bench(urls: int, what_if: bool = False) -> list[Measured]:
    """Measure the three ways (five with `what_if`), `urls` publishes each."""
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

            async def route(batch: list[str]) -> int:
                routed = await router.route(batch, depth=1, claimant=fingerprint(batch[0]))
                return len(routed.published)

            async def publish(batch: list[str]) -> int:
                await asyncio.gather(
                    *(
                        exchange.publish(persistent(CrawlMessage(u, 1).encode(), 5), routing_key=host_of(u))
                        for u in batch
                    )
                )
                return len(batch)

            plain = await channel.declare_exchange(f"{prefix}.plain", ExchangeType.TOPIC, durable=True)
            plain_queue = await channel.declare_queue(f"{prefix}.plain", durable=True)
            await plain_queue.bind(plain, "#")

            def to_plain(mode: DeliveryMode) -> Callable[[list[str]], Awaitable[int]]:
                async def send(batch: list[str]) -> int:
                    messages = [persistent(CrawlMessage(u, 1).encode(), 5) for u in batch]
                    for m in messages:
                        m.delivery_mode = mode
                    await asyncio.gather(
                        *(
                            plain.publish(m, routing_key=host_of(u))
                            for m, u in zip(messages, batch, strict=True)
                        )
                    )
                    return len(batch)

                return send

            ways: list[tuple[str, int, Callable[[list[str]], Awaitable[int]]]] = [
                ("route x1", 1, route),
                ("route x16", 16, route),
                ("publish only x16", 16, publish),
            ]
            if what_if:
                ways += [
                    ("plain queue x16", 16, to_plain(DeliveryMode.PERSISTENT)),
                    ("transient x16", 16, to_plain(DeliveryMode.NOT_PERSISTENT)),
                ]
            for n, (label, concurrency, send) in enumerate(ways):
                batches = _batches(spec, n * urls, urls)
                results.append(await _measure(label, batches, concurrency, send))
            await channel.close()
    return results


def main(argv: Sequence[str] | None = None) -> None:
    """Run the router bench and print its table."""
    parser = argparse.ArgumentParser(prog="python -m bench.router", description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=20_000, help="publishes per way (default %(default)s)")
    parser.add_argument("--what-if", action="store_true", help="also: no priority queue; transient")
    args = parser.parse_args(argv)
    results = asyncio.run(bench(args.urls, args.what_if))
    print(HEADER)
    for r in results:
        print(r.row())


if __name__ == "__main__":
    main()
