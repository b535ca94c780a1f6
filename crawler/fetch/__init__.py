"""Fetch: getting a page politely and safely: fetchers, private-network guard, robots.txt, rate limits."""

from crawler.fetch.aio import AiohttpFetcher
from crawler.fetch.fetcher import Fetcher, FollowingFetcher, HttpFetcher, Response, Scope
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.fetch.robots import Robots, Verdict

__all__ = [
    "AiohttpFetcher",
    "Budget",
    "Fetcher",
    "FollowingFetcher",
    "HttpFetcher",
    "RateLimiter",
    "Response",
    "Robots",
    "Scope",
    "Verdict",
]
