"""One page visit, politely: robots.txt, a rate token, the fetch, back-off, then extraction."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from crawler.config import Rules
from crawler.errors import FetchError
from crawler.fetch.fetcher import Fetcher, Scope
from crawler.fetch.ratelimit import Budget, RateLimiter
from crawler.fetch.robots import Robots
from crawler.frontier.retry import Failure, from_error, from_status, parse_retry_after
from crawler.parse.extract import Fields, charset_from_content_type, extract
from crawler.sink.sql import PageRecord

log = logging.getLogger(__name__)

PUSHBACK = frozenset({429, 503})  # statuses that slow the whole domain down
DISALLOWED = "disallowed by robots.txt"


@dataclass(frozen=True, slots=True)
class Fetched:
    """How the page's fetch went: its duration, the body bytes read, and its error if any."""

    seconds: float
    nbytes: int = 0
    error: FetchError | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a visit produced: the page's row, the links to route, and the failure if any."""

    record: PageRecord
    links: Sequence[str] = ()
    failure: Failure | None = None
    rate_wait: float = 0.0
    fetched: Fetched | None = None  # None when robots.txt kept the page from being fetched


def budget(rules: Rules, crawl_delay: float | None) -> Budget:
    """The domain's allowance; a robots.txt Crawl-delay caps the rate and allows no burst."""
    if crawl_delay:
        return Budget(min(rules.rate, 1 / crawl_delay), 1, rules.backoff_recovery)
    return Budget(rules.rate, rules.burst, rules.backoff_recovery)


class Visitor:
    """Visits pages for a consumer."""

    def __init__(
        self,
        fetcher: Fetcher,
        limiter: RateLimiter,
        robots: Robots,
        scope: Scope,
        rules_of: Callable[[str], Rules],
        max_retry_after: float,
    ) -> None:
        self._rules_of = rules_of  # the live rules: domains.yaml may be edited while a visit waits
        self._fetcher = fetcher
        self._limiter = limiter
        self._robots = robots
        self._scope = scope
        self._max_retry_after = max_retry_after

    async def visit(self, record: PageRecord, rules: Rules, fields: Fields) -> Outcome:
        """Visit `record.url` under the domain's `rules`; never raises for what the site does."""
        domain, url = record.domain, record.url
        crawl_delay = None
        waited = 0.0
        if rules.obey_robots:

            async def pace() -> float:
                return await self._limiter.acquire(domain, lambda: budget(self._rules_of(domain), None))

            verdict = await self._robots.check(url, rules, self._scope, pace)
            if verdict.unavailable is not None:
                return Outcome(
                    replace(record, error=verdict.unavailable), (), Failure("transient", verdict.unavailable)
                )
            if not verdict.allowed:
                return Outcome(replace(record, error=DISALLOWED), (), Failure("permanent", DISALLOWED))
            crawl_delay = verdict.crawl_delay
        waited += await self._limiter.acquire(domain, lambda: budget(self._rules_of(domain), crawl_delay))
        started = time.monotonic()
        try:
            response = await self._fetcher.fetch(url, rules, self._scope)
        except FetchError as exc:
            failure = from_error(exc)
            fetched = Fetched(time.monotonic() - started, 0, exc)
            return Outcome(
                replace(record, error=failure.error, status_code=exc.status_code, final_url=exc.url),
                (),
                failure,
                waited,
                fetched,
            )
        fetched = Fetched(time.monotonic() - started, len(response.body))
        if response.status_code in PUSHBACK:
            pause = parse_retry_after(response.headers.get("retry-after")) or 0.0
            allowance = budget(self._rules_of(domain), crawl_delay)
            factor = await self._limiter.slow_down(domain, allowance, min(pause, self._max_retry_after))
            log.info(
                "%s answered %d: rate now %.0f%% of its budget", domain, response.status_code, factor * 100
            )
        status_failure = from_status(response.status_code, response.headers.get("retry-after"))
        record = replace(
            record,
            final_url=response.final_url,
            status_code=response.status_code,
            content_type=response.content_type,
            error=status_failure.error if status_failure else None,
        )
        if status_failure is not None or not response.is_html:
            return Outcome(record, (), status_failure, waited, fetched)
        page = extract(
            response.body,
            response.final_url,
            charset=charset_from_content_type(response.content_type),
            fields=fields,
            max_links=rules.max_links,
        )
        page_record = replace(record, title=page.title, data=page.data or None)
        return Outcome(page_record, page.links, None, waited, fetched)
