"""The HTTP API under /v1: crawls, domains, stored pages and their versions, dead letters, health and
metrics, over crawler.service."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, FastAPI, Path, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as ASGIScope

from crawler.api import console
from crawler.api.security import Scope, Token, allows, authenticate
from crawler.config import CrawlConfig
from crawler.errors import (
    BadURL,
    ConfigError,
    Conflict,
    CrawlerError,
    NotFound,
    ServiceUnavailable,
    SinkError,
)
from crawler.frontier.message import CRAWL_ID
from crawler.quality.report import alerts_json
from crawler.service import (
    Control,
    CrawlView,
    DomainView,
    FleetView,
    NewCrawl,
    SeriesView,
    VersionsView,
)
from crawler.service.inputs import DEAD_LIMIT, CrawlRequest, DeadReason, RecrawlRequest
from crawler.settings import Settings
from crawler.sink.history import PageState, StoredVersion

MAX_BODY_BYTES = 64 * 1024
PROBLEM = "application/problem+json"
CrawlId = Annotated[str, Path(pattern=CRAWL_ID.pattern, max_length=64, description="a crawl's id")]
VERSIONS_LIMIT = (1, 1_000)
CRAWLS_LIMIT = (
    1,
    1_000,
)  # crawls in one answer, at least and at most  # versions of a page in one answer, at least and at most
MAX_ID = 2**63 - 1  # the database's ids and numbers are 64-bit at most


class Problem(BaseModel):
    """An error, as RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None


class NewCrawlIn(CrawlRequest):
    """A crawl to start: seeds and options."""


class DomainCounts(BaseModel):
    """A crawl's outcomes in one domain."""

    ok: int
    failed: int
    retrying: int
    dead: int
    skipped: int = 0  # not fetched by policy: robots.txt, max_pages, max_credits
    pending: int


class CrawlOptionsOut(BaseModel):
    """A crawl's options."""

    domains: list[str] | None = None
    max_depth: int | None = None
    max_pages: int | None = None
    priority: int | None = None


class CrawlOut(BaseModel):
    """A crawl: its state, options and counts per domain."""

    id: str
    label: str | None
    state: Literal["running", "finished", "cancelled", "interrupted"]
    seeds: list[str]
    options: CrawlOptionsOut
    started: datetime
    finished: datetime | None
    counts: dict[str, DomainCounts]
    credits: float | None

    @classmethod
    def of(cls, view: CrawlView) -> CrawlOut:
        """The response body of a crawl's view."""
        return cls(
            id=view.id,
            label=view.label,
            state=view.state,
            seeds=view.seeds,
            options=CrawlOptionsOut(**view.options),
            started=view.started,
            finished=view.finished,
            counts={d: DomainCounts(**c) for d, c in view.counts.items()},
            credits=view.credits,
        )


class CrawlList(BaseModel):
    """Crawls, newest first; `next` is the path of the older ones (null: none are left)."""

    crawls: list[CrawlOut]
    next: str | None = None


class SeriesOut(BaseModel):
    """Pages a crawl stored per domain in each `step` seconds from `start` (pages/s: n / step); a
    coarse span of an old crawl is shared among the steps it covers, so a count may be a fraction."""

    crawl: str
    start: datetime
    step: int
    domains: dict[str, list[float]]

    @classmethod
    def of(cls, view: SeriesView) -> SeriesOut:
        """The response body of a crawl's series."""
        return cls(crawl=view.crawl, start=view.start, step=view.step, domains=view.domains)


class QualityOut(BaseModel):
    """A crawl's coverage table (docs/quality.md): per domain, items, each field's fill rate and each
    expectation's failures as {n, of, rate}, beside `before` (the last finished crawl's), and alerts."""

    crawl: str | None
    finished: bool
    labels: dict[str, str]
    alerts: int
    domains: list[dict[str, Any]]


class CoverageAlertOut(BaseModel):
    """A coverage alert (docs/quality.md): its crawl, domain, kind, pages (`all` or a page rule) and
    subject (a field, an expectation, or `items`), and what it says."""

    crawl: str
    domain: str
    kind: str
    pages: str
    subject: str
    message: str


class CoverageAlerts(BaseModel):
    """The coverage alerts of the running crawls, and of the newest crawl if it has ended."""

    alerts: list[CoverageAlertOut]


class RobotsOut(BaseModel):
    """A domain's robots.txt over its origins: ok, none (all allowed), unavailable, or unknown yet."""

    state: Literal["ok", "none", "unavailable", "unknown"]
    origins: int
    detail: str | None


class FreshnessOut(BaseModel):
    """A domain's pages due for a refresh, and how long the oldest of them has waited."""

    due: int
    overdue_seconds: float | None


class DomainOut(BaseModel):
    """A configured domain: its queue, rates (configured, and after back-off), answers of the last
    `window` seconds by kind, robots.txt, and whether its site is refusing the crawler (and why)."""

    domain: str
    depth: int
    unacked: int | None
    rate: float
    effective_rate: float
    backoff: float
    held_seconds: float
    pages_per_second: float
    paused: bool
    workers: int
    answers: dict[str, int]
    window: int
    refused: bool
    refused_why: str | None
    robots: RobotsOut
    freshness: FreshnessOut

    @classmethod
    def of(cls, view: DomainView) -> DomainOut:
        """The response body of a domain's view."""
        h = view.health
        return cls(
            domain=view.domain,
            depth=view.depth,
            unacked=view.unacked,
            rate=view.rate,
            effective_rate=round(view.rate * h.backoff.factor, 4) if h.backoff.held <= 0 else 0.0,
            backoff=h.backoff.factor,
            held_seconds=h.backoff.held,
            pages_per_second=view.pages_per_second,
            paused=view.paused,
            workers=view.workers,
            answers=h.answers.counts,
            window=h.window,
            refused=h.refused_why is not None,
            refused_why=h.refused_why,
            robots=RobotsOut(state=h.robots.state, origins=h.robots.origins, detail=h.robots.detail),
            freshness=FreshnessOut(due=view.due, overdue_seconds=view.overdue_seconds),
        )


class DomainList(BaseModel):
    """Every configured domain."""

    domains: list[DomainOut]


class DeadLetterOut(BaseModel):
    """A message set aside in the dead queue, and why."""

    url: str
    domain: str
    reason: str
    attempts: int
    status: int
    error: str
    consumer: str
    time: str


class DeadList(BaseModel):
    """Dead letters, oldest first, one page; `next` is the `after` of the next page (null: no more)."""

    dead: list[DeadLetterOut]
    next: int | None = None


class DeadGroupOut(BaseModel):
    """Dead letters of one domain for one reason: how many, the newest one's error and time."""

    domain: str
    reason: str
    count: int
    last_error: str
    last_time: str


class DeadSummary(BaseModel):
    """Every dead letter counted by domain and reason, most first."""

    groups: list[DeadGroupOut]
    total: int


class WorkerOut(BaseModel):
    """A worker by its heartbeat: live, late (missed beats) or gone; `age` in seconds (null: gone)."""

    id: str
    host: str
    pid: int
    role: str
    state: Literal["live", "late", "gone"]
    age: float | None
    pages: int
    started: str
    domains: list[str]


class ExitOut(BaseModel):
    """A gateway exit: healthy, cooling (banned by some domains for a while) or dead (tried again in
    `dead_for` seconds; null: by the next request, as it has not answered since it died)."""

    id: str
    state: Literal["healthy", "cooling", "dead"]
    cooling: list[str]
    dead_for: float | None


class KeyOut(BaseModel):
    """A gateway API key's credits spent, against its budget (null: none)."""

    id: str
    credits: float
    budget: float | None


class GatewayOut(BaseModel):
    """A crawler-gateway replica by its last report, with its exits and keys."""

    id: str
    host: str
    pid: int
    state: Literal["live", "late", "gone"]
    age: float | None
    exits: list[ExitOut]
    keys: list[KeyOut]


class DomainFreshnessOut(BaseModel):
    """A domain's schedule: whether it recrawls, its pages due, the oldest one's wait in seconds."""

    domain: str
    recrawls: bool
    due: int
    overdue_seconds: float | None


class FleetOut(BaseModel):
    """Workers, gateway replicas, and freshness per domain."""

    workers: list[WorkerOut]
    gateways: list[GatewayOut]
    freshness: list[DomainFreshnessOut]

    @classmethod
    def of(cls, view: FleetView) -> FleetOut:
        """The response body of the fleet's view."""
        return cls(
            workers=[
                WorkerOut(state=w.state, age=w.age, **_fields(w.worker, WorkerOut)) for w in view.workers
            ],
            gateways=[
                GatewayOut(
                    state=g.state,
                    age=g.age,
                    exits=[ExitOut(**asdict(e)) for e in g.report.exits],
                    keys=[KeyOut(**asdict(k)) for k in g.report.keys],
                    **_fields(g.report, GatewayOut),
                )
                for g in view.gateways
            ],
            freshness=[DomainFreshnessOut(**asdict(f)) for f in view.freshness],
        )


class WhoAmI(BaseModel):
    """The token this request was made with: its name and scope (never its secret)."""

    name: str
    scope: Literal["read", "admin"]


def _fields(source: Any, model: type[BaseModel]) -> dict[str, Any]:
    """The fields of `source` that `model` has and is not given otherwise."""
    taken = {"state", "age", "exits", "keys"}
    return {k: getattr(source, k) for k in model.model_fields if k not in taken and hasattr(source, k)}


class PageOut(BaseModel):
    """A stored page's latest state; `version` is the number of its newest version (null: none)."""

    id: int
    url: str
    final_url: str | None
    domain: str
    status_code: int | None
    content_type: str | None
    error: str | None
    depth: int
    title: str | None
    data: dict[str, Any] | None
    fetched_at: datetime
    attempts: int
    crawl: str | None
    version: int | None
    changed_at: datetime | None
    next_fetch_at: datetime | None
    markdown: str | None = Field(description="its main content as Markdown (`content:` on)")
    text: str | None = Field(description="its main content, or a document's text, as plain text")
    lang: str | None = Field(description="the language of its text: ISO 639-1 (or 639-3)")
    simhash: str | None = Field(description="the simhash of its text, 16 hex digits")
    near_duplicate_of: str | None = Field(description="the page stored first that it nearly duplicates")
    content_refused: str | None = Field(description="why its body was not made into content")

    @classmethod
    def of(cls, state: PageState) -> PageOut:
        """The response body of a stored page."""
        return cls(**asdict(state))


class VersionOut(BaseModel):
    """One version of a page: `new`, `changed`, `gone` or `back`, and what the page was then."""

    version: int
    kind: Literal["new", "changed", "gone", "back", "reparse"]
    fetched_at: datetime
    status_code: int | None
    title: str | None
    data: dict[str, Any] | None
    crawl: str | None

    @classmethod
    def of(cls, version: StoredVersion) -> VersionOut:
        """The response body of a version."""
        return cls(**asdict(version))


class VersionList(BaseModel):
    """A page's versions, newest first; `next` is the path of the older ones (null: none are left)."""

    page: int
    versions: list[VersionOut]
    next: str | None

    @classmethod
    def of(cls, view: VersionsView, limit: int) -> VersionList:
        """The response body of a page of versions."""
        older = f"/v1/pages/{view.page}/versions?before={view.before}&limit={limit}"
        versions = [VersionOut.of(v) for v in view.versions]
        return cls(page=view.page, versions=versions, next=None if view.before is None else older)


class RecrawlOut(BaseModel):
    """What a recrawl published per domain now, and what stays due (published as room allows)."""

    published: dict[str, int]
    due: dict[str, int]


class Counted(BaseModel):
    """How many messages an action took."""

    count: int


class Health(BaseModel):
    """Liveness, or readiness with each service's state."""

    status: Literal["ok", "unavailable"]
    services: dict[str, str] = {}


def _problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    schema = {"$ref": "#/components/schemas/Problem"}
    return {
        c: {"description": "a problem (RFC 9457)", "content": {PROBLEM: {"schema": schema}}} for c in codes
    }


def problem(
    status: int, title: str, detail: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """A problem+json response."""
    body = Problem(title=title, status=status, detail=detail).model_dump()
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


class _Refused(Exception):
    def __init__(self, status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(title)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers


def _need(scope: Scope) -> Callable[[Request], Awaitable[Token]]:
    async def check(request: Request) -> Token:
        tokens: list[Token] = request.app.state.tokens
        header = request.headers.get("authorization", "")
        kind, _, presented = header.partition(" ")
        challenge = {"WWW-Authenticate": 'Bearer realm="crawler"'}
        if kind.lower() != "bearer" or not presented.strip():
            raise _Refused(401, "Unauthorized", "send Authorization: Bearer <token>", challenge)
        token = authenticate(tokens, presented.strip())
        if token is None:
            raise _Refused(401, "Unauthorized", "the token is not valid", challenge)
        if not allows(token, scope):
            raise _Refused(403, "Forbidden", f"this needs a token of scope {scope}")
        return token

    return check


READ = [Depends(_need("read"))]
ADMIN = [Depends(_need("admin"))]

v1 = APIRouter(prefix="/v1", responses=_problem_responses(401, 403, 413, 422, 503))


def _control(request: Request) -> Control:
    control: Control = request.app.state.control
    return control


@v1.post("/crawls", status_code=201, dependencies=ADMIN, response_model=CrawlOut)
async def create_crawl(body: NewCrawlIn, request: Request, response: Response) -> CrawlOut:
    """Start a crawl: record it, route its seeds; answers with its id."""
    view = await _control(request).create_crawl(
        NewCrawl(body.seeds, body.label, body.priority, body.max_depth, body.max_pages, body.domains)
    )
    response.headers["Location"] = f"/v1/crawls/{view.id}"
    return CrawlOut.of(view)


@v1.get("/crawls", dependencies=READ, response_model=CrawlList)
async def list_crawls(
    request: Request,
    state: Literal["running", "finished", "cancelled", "interrupted"] | None = None,
    limit: Annotated[int, Query(ge=CRAWLS_LIMIT[0], le=CRAWLS_LIMIT[1])] = 100,
    before: Annotated[
        str | None, Query(pattern=CRAWL_ID.pattern, max_length=64, description="only crawls listed after it")
    ] = None,
) -> CrawlList:
    """Crawls, newest first, `limit` at a time (`next` gives the older ones); `state` keeps those in it."""
    page = await _control(request).crawls_page(state, limit, before)
    older = None
    if page.before is not None:
        query = {"before": page.before, "limit": limit, **({"state": state} if state else {})}
        older = f"/v1/crawls?{urlencode(query)}"
    return CrawlList(crawls=[CrawlOut.of(v) for v in page.crawls], next=older)


@v1.get("/crawls/{crawl}", dependencies=READ, response_model=CrawlOut, responses=_problem_responses(404))
async def get_crawl(crawl: CrawlId, request: Request) -> CrawlOut:
    """One crawl: state, counts per domain, credits, started, finished."""
    return CrawlOut.of(await _control(request).get_crawl(crawl))


@v1.get(
    "/crawls/{crawl}/series", dependencies=READ, response_model=SeriesOut, responses=_problem_responses(404)
)
async def crawl_series(crawl: CrawlId, request: Request) -> SeriesOut:
    """Pages the crawl stored per domain over time, in at most 120 steps: its pages/s chart."""
    return SeriesOut.of(await _control(request).crawl_series(crawl))


@v1.get(
    "/crawls/{crawl}/quality", dependencies=READ, response_model=QualityOut, responses=_problem_responses(404)
)
async def crawl_quality(
    crawl: CrawlId,
    request: Request,
    domain: Annotated[str | None, Query(max_length=253, description="only this domain")] = None,
) -> QualityOut:
    """The crawl's field coverage and failed expectations per domain, beside the last finished crawl."""
    report = await _control(request).quality(crawl, domain)
    return QualityOut.model_validate(report.to_json())


@v1.get("/quality/alerts", dependencies=READ, response_model=CoverageAlerts)
async def quality_alerts(request: Request) -> CoverageAlerts:
    """The current coverage alerts: the console's red markers, and `crawler status`'s lines."""
    return CoverageAlerts.model_validate({"alerts": alerts_json(await _control(request).current_quality())})


@v1.post(
    "/crawls/{crawl}/cancel", dependencies=ADMIN, response_model=CrawlOut, responses=_problem_responses(404)
)
async def cancel_crawl(crawl: CrawlId, request: Request) -> CrawlOut:
    """Cancel a crawl: once this answers, no consumer starts a fetch of it; its counts are final."""
    return CrawlOut.of(await _control(request).cancel_crawl(crawl))


@v1.delete("/crawls/{crawl}", status_code=204, dependencies=ADMIN, responses=_problem_responses(404))
async def delete_crawl(crawl: CrawlId, request: Request, purge: bool = False) -> Response:
    """Forget a crawl (cancelled first if running); its pages stay unless `purge=true`."""
    await _control(request).delete_crawl(crawl, purge)
    return Response(status_code=204)


@v1.get("/domains", dependencies=READ, response_model=DomainList)
async def list_domains(request: Request) -> DomainList:
    """Every configured domain: queue depth, rate, paused, workers."""
    return DomainList(domains=[DomainOut.of(d) for d in await _control(request).domains()])


Domain = Annotated[str, Path(min_length=1, max_length=253)]


@v1.post(
    "/domains/{domain}/pause", dependencies=ADMIN, response_model=DomainOut, responses=_problem_responses(404)
)
async def pause_domain(domain: Domain, request: Request) -> DomainOut:
    """Pause a domain fleet-wide within a second; its queued messages wait, untouched."""
    control = _control(request)
    chosen = await control.pause(domain)
    return next(DomainOut.of(d) for d in await control.domains() if d.domain == chosen)


@v1.post(
    "/domains/{domain}/resume",
    dependencies=ADMIN,
    response_model=DomainOut,
    responses=_problem_responses(404),
)
async def resume_domain(domain: Domain, request: Request) -> DomainOut:
    """Resume a paused domain fleet-wide."""
    control = _control(request)
    chosen = await control.resume(domain)
    return next(DomainOut.of(d) for d in await control.domains() if d.domain == chosen)


@v1.post("/recrawls", dependencies=ADMIN, response_model=RecrawlOut)
async def recrawl(body: RecrawlRequest, request: Request) -> RecrawlOut:
    """Publish the stored pages that are due (with `all`: every one, due or not) into their queues."""
    done = await _control(request).recrawl(body.domains, body.all)
    return RecrawlOut(published=done.published, due=done.due)


PageUrl = Annotated[str, Query(min_length=1, max_length=8192, description="the page's URL")]
PageId = Annotated[int, Path(ge=1, le=MAX_ID, description="a page's id")]


@v1.get("/pages", dependencies=READ, response_model=PageOut, responses=_problem_responses(404))
async def get_page(url: PageUrl, request: Request) -> PageOut:
    """The stored page at `url` (canonicalised as the crawler stores it): its latest state."""
    return PageOut.of(await _control(request).page(url))


@v1.get(
    "/pages/{page}/archived",
    dependencies=READ,
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, **_problem_responses(404)},
)
async def get_archived(page: PageId, request: Request) -> Response:
    """The page's latest answer as the WARC archive holds it (in object storage: one ranged GET): its
    payload, with the site's status, date and Content-Type in `Crawler-Archived-*` headers."""
    found = await _control(request).page_archived(page)
    headers = {
        "Crawler-Archived-Status": str(found.status),
        "Crawler-Archived-Date": found.date,
        # As a header can carry it: a byte outside Latin-1 (a site's, kept as U+FFFD) becomes "?".
        "Crawler-Archived-Content-Type": (found.content_type or "")
        .encode("latin-1", "replace")
        .decode("latin-1"),
        # What a site sent is never run as this origin's page (the console's tokens live here).
        "Content-Security-Policy": "sandbox; default-src 'none'",
        "X-Content-Type-Options": "nosniff",
        "Content-Disposition": "attachment",
    }
    body = found.rendered if found.rendered is not None else found.body
    return Response(body, media_type="application/octet-stream", headers=headers)


@v1.get(
    "/pages/{page}/versions", dependencies=READ, response_model=VersionList, responses=_problem_responses(404)
)
async def list_versions(
    page: PageId,
    request: Request,
    before: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only versions numbered below")] = None,
    limit: Annotated[int, Query(ge=VERSIONS_LIMIT[0], le=VERSIONS_LIMIT[1])] = 100,
) -> VersionList:
    """A page's versions, newest first, `limit` at a time; `next` gives the older ones."""
    return VersionList.of(await _control(request).page_versions(page, before, limit), limit)


DomainFilter = Annotated[str | None, Query(max_length=253, description="this domain and its subdomains")]
ReasonFilter = Annotated[DeadReason | None, Query()]


@v1.get("/dead", dependencies=READ, response_model=DeadList)
async def list_dead(
    request: Request,
    domain: DomainFilter = None,
    reason: ReasonFilter = None,
    limit: Annotated[int, Query(ge=DEAD_LIMIT[0], le=DEAD_LIMIT[1])] = 100,
    after: Annotated[int, Query(ge=0, description="where this page starts: the last page's `next`")] = 0,
) -> DeadList:
    """Dead letters, oldest first, a page at a time (never the whole queue in one call); the queue is
    left as it was."""
    page = await _control(request).dead_page(domain, reason, limit, after)
    return DeadList(dead=[DeadLetterOut(**asdict(letter)) for letter in page.letters], next=page.next)


@v1.get("/dead/summary", dependencies=READ, response_model=DeadSummary)
async def dead_summary(request: Request) -> DeadSummary:
    """Every dead letter counted by domain and reason, most first; the queue is left as it was."""
    groups = await _control(request).dead_groups()
    return DeadSummary(groups=[DeadGroupOut(**asdict(g)) for g in groups], total=sum(g.count for g in groups))


@v1.get("/fleet", dependencies=READ, response_model=FleetOut)
async def fleet(request: Request) -> FleetOut:
    """Workers by heartbeat, crawler-gateway replicas with their exits and keys, freshness per domain."""
    return FleetOut.of(await _control(request).fleet())


@v1.get("/whoami", response_model=WhoAmI)
async def whoami(token: Annotated[Token, Depends(_need("read"))]) -> WhoAmI:
    """The token this request was made with: its name and scope."""
    return WhoAmI(name=token.name, scope=token.scope)


@v1.post("/dead/replay", dependencies=ADMIN, response_model=Counted)
async def replay_dead(request: Request, domain: DomainFilter = None, reason: ReasonFilter = None) -> Counted:
    """Put matching dead letters back into their domain queues, attempts reset."""
    return Counted(count=await _control(request).replay_dead(domain, reason))


@v1.delete("/dead", dependencies=ADMIN, response_model=Counted)
async def purge_dead(request: Request, domain: DomainFilter = None, reason: ReasonFilter = None) -> Counted:
    """Delete matching dead letters for good."""
    return Counted(count=await _control(request).purge_dead(domain, reason))


class Index(BaseModel):
    """Where things are: the console, the API's schema, and its health probe."""

    console: str
    openapi: str
    healthz: str


@v1.get("", response_model=Index)
async def index() -> Index:
    """The API's base: links to the console and the schema. Open, so a person who opens it is not lost."""
    return Index(console="/", openapi="/openapi.json", healthz="/v1/healthz")


@v1.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Liveness: the API answers. Open, for probes."""
    return Health(status="ok")


@v1.get("/readyz", response_model=Health, responses={503: {"model": Health}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness: RabbitMQ, Redis and the database reachable (503 if one is not). Open, for probes."""
    services = await _control(request).readiness()
    ok = all(v == "ok" for v in services.values())
    body = Health(status="ok" if ok else "unavailable", services=services)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@v1.get(
    "/metrics",
    dependencies=READ,
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(request: Request) -> Response:
    """The API's Prometheus metrics (requests by route and status)."""
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)


_STATUS = {
    NotFound: 404,
    Conflict: 409,
    BadURL: 422,
    ConfigError: 422,
    ServiceUnavailable: 503,
    SinkError: 503,
}


def create_app(
    settings: Settings, config: CrawlConfig, tokens: list[Token], control: Control | None = None
) -> FastAPI:
    """The API app; it opens its own connections at start-up unless given `control`."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if control is not None:
            app.state.control = control
            yield
            return
        async with Control.open(settings, config, "crawler-api") as opened:
            app.state.control = opened
            yield

    app = FastAPI(
        title="crawler API",
        version="1",
        description="Drive crawls over HTTP: create, inspect, cancel; pause domains; read stored pages and "
        "their versions; the dead queue.",
        lifespan=lifespan,
        docs_url=None,  # the docs UI loads scripts from a CDN; the schema is at /openapi.json
        redoc_url=None,
    )
    app.state.tokens = tokens
    registry = CollectorRegistry()
    app.state.registry = registry
    requests = Counter("crawler_api_requests", "API requests", ["route", "status"], registry=registry)
    seconds = Histogram("crawler_api_request_seconds", "API request time", ["route"], registry=registry)
    app.include_router(v1)
    console.mount(app)
    app.openapi_schema = None

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schema.setdefault("components", {}).setdefault("schemas", {})["Problem"] = (
                Problem.model_json_schema()
            )
            schema["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(_Refused)
    async def refused(_: Request, exc: _Refused) -> JSONResponse:
        return problem(exc.status, exc.title, exc.detail, exc.headers)

    @app.exception_handler(CrawlerError)
    async def crawler_error(_: Request, exc: CrawlerError) -> JSONResponse:
        status = next((s for t, s in _STATUS.items() if isinstance(exc, t)), 500)
        titles = {404: "Not Found", 409: "Conflict", 422: "Unprocessable Content", 503: "Service Unavailable"}
        return problem(status, titles.get(status, "Internal Server Error"), str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return problem(422, "Unprocessable Content", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), None, dict(exc.headers or {}))

    @app.middleware("http")
    async def count(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        started = time.monotonic()
        response = await call_next(request)
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        requests.labels(path, str(response.status_code)).inc()
        seconds.labels(path).observe(time.monotonic() - started)
        for name, value in console.SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    app.add_middleware(LimitBody)
    return app


class LimitBody:
    """Refuses request bodies over MAX_BODY_BYTES with a 413, whether declared or streamed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
            return await _refuse(send)
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES and not refused:
                    refused = True
                    if not started:
                        await _refuse(send)
                    return {"type": "http.disconnect"}  # the app stops reading; its answer is dropped
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, tracked)


async def _refuse(send: Send) -> None:
    response = problem(413, "Content Too Large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    # Sent from outside the app's middleware: the headers every other answer gets, given here.
    for name, value in console.SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    await response({"type": "http"}, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}
