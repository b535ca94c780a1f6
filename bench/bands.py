"""Do a quorum frontier's two bands still put seeds first? A backlog of links, then seeds, then a worker.

python -m bench.bands [--backlog 5000] [--seeds 10] [--prefetch 16] [--fetch-ms 5] [--rate 5]
    [--live-after 100] [--rounds 3]

For classic queues (one per domain, ten priorities) and quorum ones (no priorities on RabbitMQ < 4.0:
a domain's queue and its first band), in a fresh vhost of the bench's RabbitMQ and a fresh prefix:
declare one domain's topology, publish `backlog` links at depth 2 then `seeds` seeds through the
frontier exchange, then consume every queue of the domain on one channel as a worker does (the first
band subscribed first, each consumer with its own prefetch; the deliveries wait for the domain's
rate in the order they came, then a simulated fetch, then the ack) and note where each seed came in the
fetches. A domain fetching `rate` pages a second starts fetch k after (k - 1) / rate seconds. Then the
same with the seeds published as the worker goes through the backlog (when its `--live-after`th fetch
starts), counting fetches from then. --first-band-first subscribes a quorum frontier's first band
before the domain's queue (a worker subscribes them the other way round).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import quote, unquote

import aio_pika
import httpx
from aio_pika.abc import AbstractIncomingMessage

from bench import services
from crawler.config import CrawlConfig, DomainRules, FrontierConfig
from crawler.frontier.exchanges import declare, domain_queues, routing_key, topology
from crawler.frontier.message import CrawlMessage
from crawler.frontier.publisher import Outgoing, Publisher
from crawler.frontier.router import priority_for
from crawler.names import FIRST_BAND, Names

DOMAIN = "bands.test"
TYPES = ("classic", "quorum")
BATCH = 500  # messages per confirmed publish
WAIT = 60.0  # seconds the seeds may take to arrive before the run gives up


def nodes() -> list[str]:
    """The names of the bench RabbitMQ's nodes (the management API's view)."""
    with httpx.Client(base_url=services.MANAGEMENT, auth=services.AUTH, timeout=30, trust_env=False) as api:
        response = api.get("/api/nodes")
        response.raise_for_status()
        return [str(node["name"]) for node in response.json()]


def broker_note() -> str:
    """What a quorum queue on the bench's RabbitMQ is replicated over."""
    names = nodes()
    if len(names) == 1:
        return (
            f"the bench's RabbitMQ is one node ({names[0]}): a quorum queue there has one member, "
            "whatever replicas domains.yaml asks for: its Raft log and fsyncs are measured, not replication"
        )
    return f"the bench's RabbitMQ is a cluster of {len(names)} nodes: a quorum queue has up to 3 members"


@dataclass(slots=True)
class Order:
    """One frontier type's run: where the seeds came in the order the domain's pages were fetched."""

    queue_type: str
    live: bool = False  # the seeds were published during consumption, positions counted from then
    seeds: list[int] = field(default_factory=list)  # fetch positions, from 1
    queues: list[str] = field(default_factory=list)  # each queue: its name, type and members

    def line(self, rate: float) -> str:
        """The seeds' positions, and what they mean at `rate` pages a second."""
        if not self.seeds:
            return f"{self.queue_type:<8} no seed arrived within {WAIT:.0f}s"
        first, last = self.seeds[0], self.seeds[-1]
        since = " after their publish" if self.live else ""
        return (
            f"{self.queue_type:<8} seeds fetched {first}..{last}{since} "
            f"({last - len(self.seeds)} links before the last): at {rate:g} pages/s, "
            f"the first after {(first - 1) / rate:.1f}s, the last after {(last - 1) / rate:.1f}s"
        )


class Tokens:
    """A domain's rate limit: one fetch every `1 / rate` seconds, granted in the order asked."""

    def __init__(self, rate: float) -> None:
        self._interval = 1 / rate
        self._next = 0.0

    async def take(self) -> None:
        """Wait for this fetch's turn."""
        now = time.monotonic()
        at = max(self._next, now)
        self._next = at + self._interval
        await asyncio.sleep(at - now)


def _queue_info(amqp_url: str, queue: str) -> str:
    vhost = unquote(amqp_url.rsplit("/", 1)[1])
    path = f"/api/queues/{quote(vhost, safe='')}/{quote(queue, safe='')}"
    with httpx.Client(base_url=services.MANAGEMENT, auth=services.AUTH, timeout=30, trust_env=False) as api:
        response = api.get(path)
        if response.status_code != 200:
            return f"{queue} (management API: {response.status_code})"
        info = response.json()
    members = info.get("members")
    where = f", {len(members)} member(s): {', '.join(members)}" if isinstance(members, list) else ""
    return f"{queue}: {info.get('type', '?')}{where}"


async def _publish(publisher: Publisher, messages: Sequence[Outgoing]) -> None:
    for start in range(0, len(messages), BATCH):
        failed = [o for o in await publisher.publish(messages[start : start + BATCH]) if o is not None]
        if failed:
            raise SystemExit(f"bench.bands: {len(failed)} publishes not confirmed: {failed[0]!r}")


async def measure(
    queue_type: str,
    backlog: int,
    seeds: int,
    prefetch: int,
    fetch_ms: float,
    sim_rate: float,
    live_after: int | None = None,
) -> Order:
    """Publish `backlog` links then `seeds` seeds for one domain (or the seeds as the `live_after`th
    link's fetch starts), consume them as a worker does (fetches at `sim_rate` a second, each
    `fetch_ms` long) until every seed has arrived, and note where they came in the fetches."""
    frontier = FrontierConfig.model_validate({"queue_type": queue_type})
    config = CrawlConfig(domains={DOMAIN: DomainRules()}, frontier=frontier)
    names = Names(services.unique("bands"))
    order = Order(queue_type, live_after is not None)
    with services.vhost() as amqp_url:
        connection = await aio_pika.connect(amqp_url)
        async with connection:
            channel = await connection.channel(publisher_confirms=True)
            await declare(channel, topology(config, names))
            publisher = Publisher(await channel.get_exchange(names.frontier))
            rules = config.rules_for(DOMAIN)

            def outgoing(path: str, depth: int) -> Outgoing:
                url = f"http://{DOMAIN}/{path}"
                priority = priority_for(url, depth, rules)
                return Outgoing(routing_key(DOMAIN, priority), CrawlMessage(url, depth).encode(), priority)

            await _publish(publisher, [outgoing(f"p/{i}.html", 2) for i in range(backlog)])
            seeding = [outgoing(f"?seed={i}", 0) for i in range(seeds)]
            if live_after is None:
                await _publish(publisher, seeding)
            specs = domain_queues(names, DOMAIN, config.frontier)
            order.queues = [_queue_info(amqp_url, q.name) for q in specs]

            # As crawler.frontier.subscriptions: one channel, each of its consumers with the prefetch.
            # Deliveries wait for the domain's rate in the order they came, so the prefetch stays
            # full, and are fetched in that order.
            consuming = await connection.channel(publisher_confirms=False)
            await consuming.set_qos(prefetch_count=prefetch)
            tokens = Tokens(sim_rate)
            arrived = asyncio.Event()
            delivered = published = 0  # deliveries so far; before the seeds' publish
            handling: set[asyncio.Task[object]] = set()

            async def fetch(message: AbstractIncomingMessage) -> None:
                nonlocal delivered, published
                task = asyncio.current_task()
                assert task is not None
                handling.add(task)
                delivered += 1
                position = delivered
                if (message.priority or 0) >= FIRST_BAND:
                    order.seeds.append(position - published)
                    if len(order.seeds) == seeds:
                        arrived.set()
                await tokens.take()
                if position == live_after:  # the fetch of this delivery starts: the seeds come in
                    published = position
                    handling.add(asyncio.create_task(_publish(publisher, seeding)))
                await asyncio.sleep(fetch_ms / 1000)
                await message.ack()
                handling.discard(task)

            consumers = []
            for spec in reversed(specs):  # as crawler/frontier/subscriptions.py: the first band first
                queue = await consuming.declare_queue(spec.name, passive=True)
                consumers.append((queue, await queue.consume(fetch)))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(arrived.wait(), WAIT)
            for queue, tag in consumers:
                await queue.cancel(tag)
            await asyncio.gather(*handling)  # what was delivered is fetched and acked
            await consuming.close()
    return order


def main(argv: Sequence[str] | None = None) -> None:
    """Measure each frontier type in turn and print where the seeds arrived."""
    parser = argparse.ArgumentParser(prog="python -m bench.bands", description=__doc__.splitlines()[0])
    parser.add_argument("--backlog", type=int, default=5000, help="links queued first (default 5000)")
    parser.add_argument("--seeds", type=int, default=10, help="seeds queued after them (default 10)")
    parser.add_argument("--prefetch", type=int, default=16, help="per consumer (default 16)")
    parser.add_argument("--fetch-ms", type=float, default=5.0, help="a simulated fetch (default 5)")
    parser.add_argument(
        "--rate", type=float, default=5.0, help="the domain's pages/s, for the times (default 5)"
    )
    parser.add_argument(
        "--sim-rate",
        type=float,
        default=500.0,
        help="the pages/s of the simulated fetches: the same order, sooner (default 500)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="runs of each type (default 3)")
    parser.add_argument(
        "--live-after",
        type=int,
        default=100,
        help="then the seeds published after this many deliveries of the backlog (default 100)",
    )
    args = parser.parse_args(argv)
    if (
        min(args.backlog, args.seeds, args.prefetch, args.rounds, args.live_after) < 1
        or min(args.rate, args.sim_rate) <= 0
    ):
        parser.error("--backlog, --seeds, --prefetch, --rounds, --live-after and the rates must be positive")
    if args.live_after >= args.backlog:
        parser.error("--live-after must be below --backlog")
    depth2 = priority_for(f"http://{DOMAIN}/p/0.html", 2, CrawlConfig().rules_for(DOMAIN))
    print(
        f"{args.backlog} links (depth 2, priority {depth2}), then {args.seeds} seeds (priority 9), "
        f"for one domain; one channel consumes its queues, prefetch {args.prefetch} per consumer, "
        f"a fetch of {args.fetch_ms:g} ms each"
    )
    print(broker_note())
    for live_after in (None, args.live_after):
        if live_after is None:
            print("the seeds queued behind the backlog, then the worker starts:")
        else:
            print(f"the seeds published as the worker goes through the backlog, at fetch {live_after}:")
        for round_ in range(1, args.rounds + 1):
            for queue_type in TYPES:
                order = asyncio.run(
                    measure(
                        queue_type,
                        args.backlog,
                        args.seeds,
                        args.prefetch,
                        args.fetch_ms,
                        args.sim_rate,
                        live_after,
                    )
                )
                if round_ == 1 and live_after is None:
                    print(f"  {queue_type} queues: {'; '.join(order.queues)}")
                print(f"  round {round_}: {order.line(args.rate)}", flush=True)


if __name__ == "__main__":
    main()
