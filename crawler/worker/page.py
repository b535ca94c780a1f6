"""One page visit, politely: robots.txt, a rate token, the fetch, back-off, then extraction.

A redirect ends the visit: the page's row records it, and its target is routed like a link (see
`Outcome.redirect`), so every hop takes its own domain's token and passes robots.txt and dedup.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from crawler.config import Rules
from crawler.errors import BackendHalt, BadURL, Cancelled, FetchError, Refused, TooManyRedirects
from crawler.fetch.fetcher import Fetcher, Response, conditional_headers
from crawler.fetch.ratelimit import RateLimiter, Taken, budget
from crawler.fetch.robots import Robots
from crawler.frontier import recrawl
from crawler.frontier.message import Refresh
from crawler.frontier.retry import Failure, from_error, from_status, parse_retry_after
from crawler.frontier.scope import Scope
from crawler.frontier.urls import fingerprint, host_of
from crawler.parse.extract import Fields
from crawler.parse.reading import read_page
from crawler.parse.signature import signature_of
from crawler.quality.checks import Expectations, Verdict
from crawler.sink.sql import PageRecord
from crawler.worker.archiving import Archiving
from crawler.worker.backoffs import KeptBackoffs
from crawler.worker.content import Contents

log = logging.getLogger(__name__)

PUSHBACK = frozenset({429, 503})  # statuses that slow the whole domain down
NOT_MODIFIED = 304
DISALLOWED = "disallowed by robots.txt"


@dataclass(frozen=True, slots=True)
class Fetched:
    """How the page's fetch went: its duration, the body bytes read, and its error if any."""

    seconds: float
    nbytes: int = 0
    error: FetchError | None = None


@dataclass(frozen=True, slots=True)
class Seen:
    """What an answer says of the page's freshness: its validators, its content's signature (None if
    not asked for), how long its server calls it fresh, and whether it was a 304 to a refresh."""

    etag: str | None = None
    last_modified: str | None = None
    signature: str | None = None
    max_age: float | None = None
    not_modified: bool = False


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a visit produced: the page's row, the links to route, and the failure if any."""

    record: PageRecord
    links: Sequence[str] = ()
    failure: Failure | None = None
    rate_wait: float = 0.0
    fetched: Fetched | None = None  # None when robots.txt kept the page from being fetched
    redirect: str | None = None  # the canonical target of a redirect, to route like a link
    late: bool = False  # not fetched: the fetch could not have ended within the delivery's time
    extraction_failures: tuple[str, ...] = ()  # required fields missing, or PARSE_HOOK if its hook failed
    seen: Seen = Seen()  # validators and signature of the answer, when there was one
    disallowed: bool = False  # robots.txt keeps the page out: skipped, by policy, not failed
    # Its data checked against its domain's expectations (None: no extraction ran); counted with it.
    verdict: Verdict | None = None


@dataclass(frozen=True, slots=True)
class Admitted:
    """A page its admission (crawler/worker/admission.py) let through: robots.txt's verdict was read
    from this worker's copy, and its rate token asked for in the same round trip."""

    taken: Taken
    crawl_delay: float | None = None


def conditional(refresh: Refresh | None) -> dict[str, str] | None:
    """The conditional request of a refresh: its stored validators; None when it has none."""
    return None if refresh is None else conditional_headers(refresh.etag, refresh.last_modified)


def _seen(response: Response, sign_headers: bool) -> Seen:
    """The answer's validators; for a body that is not read (not HTML), its headers' signature."""
    headers = response.headers
    etag, modified = headers.get("etag"), headers.get("last-modified")
    signed = None
    if sign_headers:
        signed = signature_of(response.content_type, headers.get("content-length"), etag, modified)
    return Seen(etag, modified, signed, recrawl.max_age(headers))


def hop_id(url: str) -> str:
    """How a redirect chain (`CrawlMessage.via`) names a canonical URL."""
    return fingerprint(url).hex()


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
        archiving: Archiving | None = None,
        backoffs: KeptBackoffs | None = None,
        contents: Contents | None = None,
    ) -> None:
        self._contents = contents  # None: no domain has `content:` on (or tests)
        self._archiving = archiving  # None: nothing is archived (tests)
        self._backoffs = backoffs  # None: back-offs live in Redis only (tests)
        self._rules_of = rules_of  # the live rules: domains.yaml may be edited while a visit waits
        self._fetcher = fetcher
        self._limiter = limiter
        self._robots = robots
        self._scope = scope
        self._max_retry_after = max_retry_after

    @property
    def fetcher(self) -> Fetcher:
        """The fetch layer the visits go through."""
        return self._fetcher

    @property
    def archiving(self) -> Archiving | None:
        """Where the visits' answers are archived; None: nowhere."""
        return self._archiving

    @property
    def limiter(self) -> RateLimiter:
        """The fleet-wide rate limiter the visits take their tokens from."""
        return self._limiter

    @property
    def robots(self) -> Robots:
        """robots.txt as the visits read it."""
        return self._robots

    async def visit(
        self,
        record: PageRecord,
        rules: Rules,
        fields: Fields,
        via: Sequence[str] = (),
        cancelled: Callable[[], Awaitable[bool]] | None = None,
        start_by: float | None = None,
        admitted: Admitted | None = None,
        refresh: Refresh | None = None,
        expectations: Expectations | None = None,
    ) -> Outcome:
        """Visit `record.url` under the domain's `rules`; never raises for what the site does.

        BackendHalt (the fetch service refuses the key, or its budget is spent) is raised: the
        domain stops, the page is not the site's failure. If `cancelled()` holds right before the
        request would go out, raise Cancelled instead.

        `via` is the redirect chain that led here (`hop_id`s), for max_redirects and loops. A fetch
        that would start after `start_by` (monotonic) is not started: the outcome is `late`.
        `admitted`: robots.txt and the first ask for a token were done by the page's admission.
        `refresh`: the stored page's validators, sent as a conditional request (a 304 is not parsed).
        `expectations`: what its extracted data is checked against (None: nothing is checked).
        """
        domain, url = record.domain, record.url
        crawl_delay = None
        waited = 0.0
        if admitted is not None:
            crawl_delay = admitted.crawl_delay
        elif rules.obey_robots:
            verdict = await self._robots.check(url, rules, self.hop)
            if verdict.refused is not None:  # robots.txt could not be asked: nor can the page be
                refused = from_error(verdict.refused)
                return Outcome(replace(record, error=refused.error, final_url=url), (), refused)
            if verdict.unavailable is not None:
                return Outcome(
                    replace(record, error=verdict.unavailable), (), Failure("transient", verdict.unavailable)
                )
            if not verdict.allowed:
                failure = Failure("permanent", DISALLOWED)
                return Outcome(replace(record, error=DISALLOWED), (), failure, disallowed=True)
            crawl_delay = verdict.crawl_delay
        waited += await self._limiter.acquire(
            domain,
            lambda: budget(self._rules_of(domain), crawl_delay),
            admitted.taken if admitted is not None else None,
        )
        # The rate wait may have been long: a cancel that answered meanwhile must stop this request.
        if cancelled is not None and await cancelled():
            raise Cancelled(f"{url}: its crawl was cancelled")
        started = time.monotonic()
        if start_by is not None and started > start_by:
            return Outcome(record, rate_wait=waited, late=True)
        asked = conditional(refresh)
        try:
            # With content on, a document's body is read too (the fetcher leaves others' unread).
            reads = self._contents is not None and rules.content is not None
            response = await self._fetcher.fetch(url, rules, html_only=not reads, headers=asked)
        except BackendHalt:
            raise
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
        record = replace(
            record, credits=response.credits, exit_id=response.exit_id, rendered=response.rendered
        )
        if self._archiving is not None:
            # On disk before the row that points at it is stored, and so before the ack.
            previous = refresh.archived if refresh is not None else None
            archived = await self._archiving.response(response, rules, asked, previous)
            record = replace(record, archived=previous if archived and archived.revisit else archived)
        if response.status_code in PUSHBACK:
            pause = parse_retry_after(response.headers.get("retry-after")) or 0.0
            allowance = budget(self._rules_of(domain), crawl_delay)
            kept = await self._limiter.slow_down(domain, allowance, min(pause, self._max_retry_after))
            factor = kept[0]
            if self._backoffs is not None:
                await self._backoffs.pushed_back(domain, kept)
            log.info(
                "%s answered %d: rate now %.0f%% of its budget", domain, response.status_code, factor * 100
            )
        sign = refresh is not None or rules.recrawl_for(url) is not None
        seen = _seen(response, sign and not response.is_html)
        if response.status_code == NOT_MODIFIED and refresh is not None:
            record = replace(record, final_url=response.final_url, status_code=response.status_code)
            return Outcome(record, (), None, waited, fetched, seen=replace(seen, not_modified=True))
        location = response.location
        if location is not None:
            outcome = self._redirected(record, response, location, rules, via, waited, fetched)
            return replace(outcome, seen=replace(seen, signature=signature_of(location) if sign else None))
        status_failure = from_status(response.status_code, response.headers.get("retry-after"))
        record = replace(
            record,
            final_url=response.final_url,
            status_code=response.status_code,
            content_type=response.content_type,
            error=status_failure.error if status_failure else None,
        )
        if (
            status_failure is None
            and self._contents is not None
            and self._contents.reads(rules, record.content_type, response.final_url)
        ):
            # Signed by its headers: a refresh that finds them unchanged keeps what was read before.
            if refresh is not None and refresh.unchanged(seen.signature):
                return Outcome(record, (), None, waited, fetched, seen=seen)
            made = await self._contents.document(record, rules, response.body, response.final_url)
            return Outcome(made.record, (), None, waited, fetched, seen=seen)
        if status_failure is not None or not response.is_html:
            return Outcome(record, (), status_failure, waited, fetched, seen=seen)
        read = await read_page(
            record.url,
            response.final_url,
            response.status_code,
            response.headers,
            response.body,
            response.content_type,
            rules,
            fields,
            seconds=max(rules.timeout - (time.monotonic() - started), 0.1),
            sign=sign,
        )
        record = replace(record, title=read.title, data=read.data or None, error=read.error)
        # Checked whether or not a required field failed it: its fill counts go with every page read.
        # A page failing an expectation is stored as it is, never retried: a fetch does not mend markup.
        checked = None if expectations is None else expectations.check(record.url, read.data or {})
        if checked is not None and checked.failures:
            record = replace(record, expectations=checked.listed())
        if read.error is not None:
            failure = Failure("permanent", read.error, response.status_code)
            return Outcome(
                record, read.links, failure, waited, fetched, extraction_failures=read.blamed, verdict=checked
            )
        links: Sequence[str] = read.links
        # A refresh that finds the stored content keeps its content columns: no need to make them.
        unchanged = refresh is not None and refresh.unchanged(read.signature)
        if self._contents is not None and rules.content is not None and not unchanged:
            made = await self._contents.page(record, rules, response.body, response.final_url)
            # A near-duplicate's links are not followed: its row's near_duplicate_of says why.
            record, links = made.record, () if made.skip_links else links
        seen = replace(seen, signature=read.signature)
        return Outcome(record, links, None, waited, fetched, seen=seen, verdict=checked)

    def _redirected(
        self,
        record: PageRecord,
        response: Response,
        location: str,
        rules: Rules,
        via: Sequence[str],
        waited: float,
        fetched: Fetched,
    ) -> Outcome:
        """The row of a page that redirects, and the target to route (unless the redirect is refused)."""
        status = response.status_code
        record = replace(
            record, final_url=response.final_url, status_code=status, content_type=response.content_type
        )
        error: FetchError | None = None
        try:
            target = self._scope.canonical(location, response.final_url)
            self._scope.domain(target)
        except BadURL as exc:
            error = Refused(f"redirect refused: {exc}", status_code=status)
        else:
            record = replace(record, final_url=target)
            if target == record.url or hop_id(target) in via:
                error = TooManyRedirects(f"redirect loop back to {target}", status_code=status)
            elif len(via) >= rules.max_redirects:
                error = TooManyRedirects(f"more than {rules.max_redirects} redirects", status_code=status)
        if error is not None:
            failure = from_error(error)
            return Outcome(replace(record, error=failure.error), (), failure, waited, fetched)
        return Outcome(record, (), None, waited, fetched, redirect=target)

    async def hop(self, url: str) -> None:
        """Clear one request of a followed chain: in scope, and a token from its own domain's bucket."""
        canonical = self._scope.canonical(url)
        domain = self._scope.domain(canonical) or host_of(canonical)
        await self._limiter.acquire(domain, lambda: budget(self._rules_of(domain), None))
