"""The same work in Scrapy: follow the bench hosts' links, extract title and price, write JSON lines.

`python -m bench.scrapy_spider scrapy ...` runs plain Scrapy (its own scheduler and dupefilter, in
memory); `... redis ...` runs a scrapy-redis spider (scheduler queue and dupefilter in Redis under
`--prefix`, start URLs read from `<prefix>:start_urls`), of which several processes share the work.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import scrapy
from scrapy.crawler import CrawlerProcess
from scrapy.http import Response
from scrapy_redis.spiders import RedisSpider

CONCURRENT_REQUESTS = 64
# Four hosts at 16 each is 64, the same concurrency as the crawler's 4 queues x prefetch 16.
CONCURRENT_REQUESTS_PER_DOMAIN = 16
# scrapy-redis checks for idleness every 5 s (Scrapy's heartbeat); this must exceed a process's
# start-up, since the clock starts at import.
REDIS_MAX_IDLE = 10


def _parse(spider: Any, response: Response) -> Iterator[Any]:
    # One page's work, identical for both spiders.
    yield {
        "url": response.url,
        "title": response.css("h1::text").get(),
        "price": response.css(".price::text").get(),
        "t": time.time(),
    }
    for href in response.css("a::attr(href)").getall():
        url = response.urljoin(href)
        if urlsplit(url).netloc in spider.bench_hosts:
            yield scrapy.Request(url, callback=spider.parse)


class BenchSpider(scrapy.Spider):
    """Plain Scrapy: starts from the index pages."""

    name = "bench"

    def __init__(self, hosts: str = "", start: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bench_hosts = set(hosts.split(","))
        self.start_urls = [u for u in start.split(",") if u]

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """Yield the page's item and a request per link to a bench host."""
        yield from _parse(self, response)


class BenchRedisSpider(RedisSpider):
    """scrapy-redis: start URLs from Redis, shared scheduler and dupefilter."""

    name = "bench-redis"

    def __init__(self, hosts: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.bench_hosts = set(hosts.split(","))

    def parse(self, response: Response, **kwargs: Any) -> Iterator[Any]:
        """Yield the page's item and a request per link to a bench host."""
        yield from _parse(self, response)


def settings(items: str, log: str | None) -> dict[str, Any]:
    """Scrapy's settings for the bench: its defaults, but 64 requests at once and no robots.txt."""
    return {
        "CONCURRENT_REQUESTS": CONCURRENT_REQUESTS,
        "CONCURRENT_REQUESTS_PER_DOMAIN": CONCURRENT_REQUESTS_PER_DOMAIN,
        "DOWNLOAD_DELAY": 0,
        "ROBOTSTXT_OBEY": False,  # the crawler does not read robots.txt either (obey_robots is unused)
        "TELNETCONSOLE_ENABLED": False,
        "LOG_LEVEL": "INFO",
        "LOG_FILE": log,
        "FEEDS": {items: {"format": "jsonlines"}},
    }


def redis_settings(redis_url: str, prefix: str) -> dict[str, Any]:
    """scrapy-redis's scheduler and dupefilter, every key under `prefix`, kept when a process ends."""
    return {
        "SCHEDULER": "scrapy_redis.scheduler.Scheduler",
        "DUPEFILTER_CLASS": "scrapy_redis.dupefilter.RFPDupeFilter",
        # Persist: the first process to finish must not flush what the others still use.
        "SCHEDULER_PERSIST": True,
        "SCHEDULER_QUEUE_KEY": f"{prefix}:requests",
        "SCHEDULER_DUPEFILTER_KEY": f"{prefix}:dupefilter",
        "REDIS_START_URLS_KEY": f"{prefix}:start_urls",
        "REDIS_URL": redis_url,
        "MAX_IDLE_TIME_BEFORE_CLOSE": REDIS_MAX_IDLE,
    }


def main() -> None:
    """Run one Scrapy process."""
    parser = argparse.ArgumentParser(prog="python -m bench.scrapy_spider", description=__doc__)
    parser.add_argument("mode", choices=["scrapy", "redis"])
    parser.add_argument("--hosts", required=True, help="comma-separated host:port to follow links to")
    parser.add_argument("--start", default="", help="comma-separated start URLs (plain Scrapy)")
    parser.add_argument("--items", required=True, help="JSON lines file to write items to")
    parser.add_argument("--log", help="log file")
    parser.add_argument("--redis-url", default="redis://localhost:6379/0")
    parser.add_argument("--prefix", default="scrapy-bench", help="Redis key prefix (scrapy-redis)")
    args = parser.parse_args()
    config = settings(args.items, args.log)
    if args.mode == "redis":
        config.update(redis_settings(args.redis_url, args.prefix))
    process = CrawlerProcess(config)
    if args.mode == "redis":
        process.crawl(BenchRedisSpider, hosts=args.hosts)
    else:
        process.crawl(BenchSpider, hosts=args.hosts, start=args.start)
    process.start()


if __name__ == "__main__":
    main()
