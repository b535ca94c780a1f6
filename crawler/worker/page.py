"""One page visit, politely: robots.txt, a rate token, the fetch, back-off, then extraction.

A redirect ends the visit: the page's row records it, and its target is routed like a link (see
`Visit.redirect`), so every hop takes its own domain's token and passes robots.txt and dedup.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace

from crawler.archive import Archived
from crawler.config import Rules
from crawler.errors import BackendHalt, BadURL, Cancelled, FetchError, Refused, TooManyRedirects
from crawler.fetch.fetcher import Fetcher, Response, conditional_headers
from crawler.fetch.ratelimit import HORIZON, Budget, RateLimiter, Taken, Token, budget
from crawler.fetch.robots import Robots
from crawler.fetch.robots import Verdict as RobotsVerdict
from crawler.fetch.wire import OnWire, paced
from crawler.frontier import recrawl
from crawler.frontier.message import Refresh
from crawler.frontier.retry import Failure, from_error, from_status, parse_retry_after
from crawler.frontier.scope import Scope
from crawler.frontier.urls import fingerprint, host_of
from crawler.parse.extract import Fields
from crawler.parse.reading import read_page
from crawler.parse.signature import signature_of
from crawler.quality.checks import Expectations, Verdict
from crawler.visited import Answered, PageTask, Validators, Visited
from crawler.worker.addresses import Addresses
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
class Visit:
    """What a visit produced: the page as it found it, the links to route, and the failure if any."""

    visited: Visited
    links: Sequence[str] = ()
    failure: Failure | None = None
    rate_wait: float = 0.0
    fetched: Fetched | None = None  # None when robots.txt kept the page from being fetched
    redirect: str | None = None  # the canonical target of a redirect, to route like a link
    late: bool = False  # not fetched: the fetch could not have ended within the delivery's time
    extraction_failures: tuple[str, ...] = ()  # required fields missing, or PARSE_HOOK if its hook failed
    disallowed: bool = False  # robots.txt keeps the page out: skipped, by policy, not failed
    # Its data checked against its domain's expectations (None: no extraction ran); counted with it.
    verdict: Verdict | None = None


@dataclass(frozen=True, slots=True)
class _Answer:
    """A page whose answer came: what is known of it before its body is read."""

    task: PageTask
    response: Response
    answered: Answered
    validators: Validators
    waited: float
    fetched: Fetched
    started: float  # when its fetch started (monotonic)
    refresh: Refresh | None  # the stored page's validators it was asked with; None: a first fetch
    sign: bool  # its content is signed: it is refreshed, or may be

    def visit(self, visited: Visited, failure: Failure | None = None, redirect: str | None = None) -> Visit:
        """The visit that ends here, with nothing to route but its redirect."""
        return Visit(visited, (), failure, self.waited, self.fetched, redirect)


@dataclass(frozen=True, slots=True)
class Admitted:
    """A page its admission (crawler/worker/admission.py) let through: robots.txt's verdict was read
    from this worker's copy, and its rate token asked for in the same round trip."""

    taken: Taken
    crawl_delay: float | None = None
    at: float | None = None  # when its admission answered (monotonic): its token was due `wait` after
    factor: float = 1.0  # its host's back-off after a 429 or 503 (1 = its full rate)


def conditional(refresh: Refresh | None) -> dict[str, str] | None:
    """The conditional request of a refresh: its stored validators; None when it has none."""
    return None if refresh is None else conditional_headers(refresh.etag, refresh.last_modified)


def _validators(response: Response, sign_headers: bool) -> Validators:
    """The answer's validators; for a body that is not read (not HTML), its headers' signature."""
    headers = response.headers
    etag, modified = headers.get("etag"), headers.get("last-modified")
    signed = None
    if sign_headers:
        signed = signature_of(response.content_type, headers.get("content-length"), etag, modified)
    return Validators(etag, modified, signed, recrawl.max_age(headers))


def _answered(response: Response, archived: Archived | None) -> Answered:
    """What the server answered, as the page's row records it."""
    return Answered(
        response.final_url,
        response.status_code,
        response.content_type,
        response.credits,
        response.exit_id,
        response.rendered,
        archived,
    )


def _kept_out(task: PageTask, verdict: RobotsVerdict) -> Visit | None:
    """The visit robots.txt ends before its fetch: it could not be asked, or it keeps the page out."""
    if verdict.refused is not None:  # robots.txt could not be asked: nor can the page be
        refused = from_error(verdict.refused)
        return Visit(Visited(task, Answered(final_url=task.url), refused.error), failure=refused)
    if verdict.unavailable is not None:
        return Visit(
            Visited(task, error=verdict.unavailable), failure=Failure("transient", verdict.unavailable)
        )
    if not verdict.allowed:
        return Visit(
            Visited(task, error=DISALLOWED), failure=Failure("permanent", DISALLOWED), disallowed=True
        )
    return None


def _fetch_failed(task: PageTask, exc: FetchError, waited: float, fetched: Fetched) -> Visit:
    """The visit of a page whose fetch failed: its error, and the status and URL it failed at."""
    failure = from_error(exc)
    visited = Visited(task, Answered(final_url=exc.url, status_code=exc.status_code), failure.error)
    return Visit(visited, (), failure, waited, fetched)


def _not_modified(got: _Answer) -> Visit:
    """A refresh answered 304: the stored page stands, its content and type kept as stored."""
    answered = replace(got.answered, content_type=None)
    return got.visit(Visited(got.task, answered, validators=replace(got.validators, not_modified=True)))


def _redirected(got: _Answer, scope: Scope, location: str, rules: Rules, via: Sequence[str]) -> Visit:
    """The visit of a page that redirects, with the target to route (unless the redirect is refused)."""
    task, response = got.task, got.response
    status = response.status_code
    answered = got.answered
    validators = replace(got.validators, signature=signature_of(location) if got.sign else None)
    error: FetchError | None = None
    target = None
    try:
        target = scope.canonical(location, response.final_url)
        scope.domain(target)
    except BadURL as exc:
        error = Refused(f"redirect refused: {exc}", status_code=status)
    else:
        answered = replace(answered, final_url=target)
        if target == task.url or hop_id(target) in via:
            error = TooManyRedirects(f"redirect loop back to {target}", status_code=status)
        elif len(via) >= rules.max_redirects:
            error = TooManyRedirects(f"more than {rules.max_redirects} redirects", status_code=status)
    if error is not None:
        failure = from_error(error)
        return got.visit(Visited(task, answered, failure.error, validators=validators), failure)
    return got.visit(Visited(task, answered, validators=validators), redirect=target)


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
        addresses: Addresses | None = None,
    ) -> None:
        self._addresses = addresses  # None: no budget per IP address (no `per_ip:`, or tests)
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
        task: PageTask,
        rules: Rules,
        fields: Fields,
        via: Sequence[str] = (),
        cancelled: Callable[[], Awaitable[bool]] | None = None,
        start_by: float | None = None,
        admitted: Admitted | None = None,
        refresh: Refresh | None = None,
        expectations: Expectations | None = None,
    ) -> Visit:
        """Visit `task.url` under the domain's `rules`; never raises for what the site does.

        BackendHalt (the fetch service refuses the key, or its budget is spent) is raised: the
        domain stops, the page is not the site's failure. If `cancelled()` holds right before the
        request would go out, raise Cancelled instead.

        `via` is the redirect chain that led here (`hop_id`s), for max_redirects and loops. A fetch
        that would start after `start_by` (monotonic) is not started: the visit is `late`.
        `admitted`: robots.txt and the first ask for a token were done by the page's admission.
        `refresh`: the stored page's validators, sent as a conditional request (a 304 is not parsed).
        `expectations`: what its extracted data is checked against (None: nothing is checked).
        """
        crawl_delay = admitted.crawl_delay if admitted is not None else None
        if admitted is None and rules.obey_robots:
            verdict = await self._robots.check(task.url, rules, self.hop)
            kept_out = _kept_out(task, verdict)
            if kept_out is not None:
                return kept_out
            crawl_delay = verdict.crawl_delay
        try:
            share = await self._share(task.url)
        except FetchError as exc:  # its name has no address, or cannot be resolved now
            return _fetch_failed(task, exc, 0.0, Fetched(0.0, 0, exc))
        token = await self._rate_token(task, crawl_delay, admitted, cancelled, share)
        waited = token.waited
        started = time.monotonic()
        if start_by is not None and started > start_by:
            return Visit(Visited(task), rate_wait=waited, late=True)
        asked = conditional(refresh)
        allowance = budget(self._rules_of(task.domain), crawl_delay)
        try:
            # With content on, a document's body is read too (the fetcher leaves others' unread).
            reads = self._contents is not None and rules.content is not None
            with paced(lambda: self._limiter.sending(task.domain, allowance, token, share)):
                response = await self._fetcher.fetch(task.url, rules, html_only=not reads, headers=asked)
        except BackendHalt:
            raise
        except FetchError as exc:
            return _fetch_failed(task, exc, waited, Fetched(time.monotonic() - started, 0, exc))
        fetched = Fetched(time.monotonic() - started, len(response.body))
        archived = await self._archived(response, rules, asked, refresh)
        await self._pushed_back(task.domain, response, crawl_delay)
        sign = refresh is not None or rules.recrawl_for(task.url) is not None
        validators = _validators(response, sign and not response.is_html)
        answered = _answered(response, archived)
        got = _Answer(task, response, answered, validators, waited, fetched, started, refresh, sign)
        if response.status_code == NOT_MODIFIED and refresh is not None:
            return _not_modified(got)
        if response.location is not None:
            return _redirected(got, self._scope, response.location, rules, via)
        return await self._read(got, rules, fields, expectations)

    async def _rate_token(
        self,
        task: PageTask,
        crawl_delay: float | None,
        admitted: Admitted | None,
        cancelled: Callable[[], Awaitable[bool]] | None,
        share: tuple[str, Budget] | None = None,
    ) -> Token:
        """Wait for the domain's rate token (and its address's, with `share`). Cancelled if its crawl
        was meanwhile."""
        domain = task.domain
        token = await self._limiter.token(
            domain,
            lambda: budget(self._rules_of(domain), crawl_delay),
            admitted.taken if admitted is not None else None,
            share,
            admitted.at if admitted is not None else None,
            self._horizon(domain),
        )
        # The rate wait may have been long: a cancel that answered meanwhile must stop this request.
        if cancelled is not None and await cancelled():
            raise Cancelled(f"{task.url}: its crawl was cancelled")
        return token

    async def _archived(
        self, response: Response, rules: Rules, asked: dict[str, str] | None, refresh: Refresh | None
    ) -> Archived | None:
        """Where the answer is archived (a revisit: where the stored page's was); None: nowhere."""
        previous = refresh.archived if refresh is not None else None
        if self._archiving is None:
            return None
        # On disk before the row that points at it is stored, and so before the ack.
        archived = await self._archiving.response(response, rules, asked, previous)
        return previous if archived and archived.revisit else archived

    async def _pushed_back(self, domain: str, response: Response, crawl_delay: float | None) -> None:
        """Slow the whole domain down if its answer asks to (429, 503), for its Retry-After if given."""
        if response.status_code not in PUSHBACK:
            return
        pause = parse_retry_after(response.headers.get("retry-after")) or 0.0
        allowance = budget(self._rules_of(domain), crawl_delay)
        kept = await self._limiter.slow_down(domain, allowance, min(pause, self._max_retry_after))
        factor = kept[0]
        if self._backoffs is not None:
            await self._backoffs.pushed_back(domain, kept)
        log.info("%s answered %d: rate now %.0f%% of its budget", domain, response.status_code, factor * 100)

    async def _read(
        self, got: _Answer, rules: Rules, fields: Fields, expectations: Expectations | None
    ) -> Visit:
        """What the answer's body gives: a document's content, an HTML page's reading, or nothing
        (a failing status, a type that is not read)."""
        response = got.response
        status_failure = from_status(response.status_code, response.headers.get("retry-after"))
        if status_failure is None and self._reads_document(rules, response):
            return await self._document(got, rules)
        if status_failure is not None or not response.is_html:
            error = status_failure.error if status_failure else None
            return got.visit(
                Visited(got.task, got.answered, error, validators=got.validators), status_failure
            )
        return await self._extracted(got, rules, fields, expectations)

    def _reads_document(self, rules: Rules, response: Response) -> bool:
        """True if the answer, not HTML, is read as a document (with `content:` on)."""
        return self._contents is not None and self._contents.reads(
            rules, response.content_type, response.final_url
        )

    async def _document(self, got: _Answer, rules: Rules) -> Visit:
        """A document answer: its content made, unless a refresh finds its headers' signature unchanged."""
        answered, validators, refresh = got.answered, got.validators, got.refresh
        # Signed by its headers: a refresh that finds them unchanged keeps what was read before.
        if self._contents is None or (refresh is not None and refresh.unchanged(validators.signature)):
            return got.visit(Visited(got.task, answered, validators=validators))
        response = got.response
        made = await self._contents.document(
            got.task, response.content_type, rules, response.body, response.final_url
        )
        return got.visit(
            Visited(got.task, answered, title=made.title, content=made.content, validators=validators)
        )

    async def _extracted(
        self, got: _Answer, rules: Rules, fields: Fields, expectations: Expectations | None
    ) -> Visit:
        """An HTML answer: its fields and links read, its data checked, then its content made."""
        task, response = got.task, got.response
        read = await read_page(
            task.url,
            response.final_url,
            response.status_code,
            response.headers,
            response.body,
            response.content_type,
            rules,
            fields,
            seconds=max(rules.timeout - (time.monotonic() - got.started), 0.1),
            sign=got.sign,
        )
        # Checked whether or not a required field failed it: its fill counts go with every page read.
        # A page failing an expectation is stored as it is, never retried: a fetch does not mend markup.
        checked = None if expectations is None else expectations.check(task.url, read.data or {})
        failed = checked.listed() if checked is not None and checked.failures else None
        visited = Visited(task, got.answered, read.error, read.title, read.data or None, failed)
        if read.error is not None:
            failure = Failure("permanent", read.error, response.status_code)
            return Visit(
                visited,
                read.links,
                failure,
                got.waited,
                got.fetched,
                extraction_failures=read.blamed,
                verdict=checked,
            )
        links: Sequence[str] = read.links
        # A refresh that finds the stored content keeps its content columns: no need to make them.
        unchanged = got.refresh is not None and got.refresh.unchanged(read.signature)
        if self._contents is not None and rules.content is not None and not unchanged:
            made = await self._contents.page(task, rules, response.body, response.final_url)
            # A near-duplicate's links are not followed: its row's near_duplicate_of says why.
            visited, links = replace(visited, content=made.content), () if made.skip_links else links
        visited = replace(visited, validators=replace(got.validators, signature=read.signature))
        return Visit(visited, links, None, got.waited, got.fetched, verdict=checked)

    async def hop(self, url: str) -> OnWire:
        """Clear one request of a followed chain: in scope, and a token from its own domain's bucket;
        what the request tells as it goes."""
        canonical = self._scope.canonical(url)
        _, on_wire = await self.cleared(canonical, self._scope.domain(canonical) or host_of(canonical))
        return on_wire

    async def cleared(self, url: str, domain: str, crawl_delay: float | None = None) -> tuple[Token, OnWire]:
        """A token for one request to `url` from `domain`'s bucket and its address's (with `per_ip:`),
        and what the request tells as it goes."""
        share = await self._share(url)
        allowance = budget(self._rules_of(domain), crawl_delay)
        token = await self._limiter.token(
            domain,
            lambda: budget(self._rules_of(domain), crawl_delay),
            ip=share,
            horizon=self._horizon(domain),
        )
        return token, lambda: self._limiter.sending(domain, allowance, token, share)

    def _horizon(self, domain: str) -> float:
        """How far ahead a token may be reserved: not at all for a discovered host, as its admission."""
        return 0.0 if self._scope.config.in_layout(domain) else HORIZON

    async def _share(self, url: str) -> tuple[str, Budget] | None:
        """The address `url`'s request goes to and the budget it shares there; None without `per_ip:`."""
        return None if self._addresses is None else await self._addresses.share(url)
