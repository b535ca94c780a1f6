"""Fetch: getting a page politely and safely: fetchers, private-network guard, robots.txt, rate limits."""

from crawler.fetch.aio import AiohttpFetcher
from crawler.fetch.fetcher import BoundedFetcher, Fetcher, Hop, HttpFetcher, Response, follow
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.fetch.robots import Robots, Verdict

__all__ = [
    "AiohttpFetcher",
    "BoundedFetcher",
    "Budget",
    "Fetcher",
    "Hop",
    "HttpFetcher",
    "RateLimiter",
    "Response",
    "Robots",
    "Verdict",
    "follow",
]
