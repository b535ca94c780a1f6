"""/v1/crawls: start a crawl, list them, show one and its pages/s series, cancel, delete."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal
from urllib.parse import urlencode

from fastapi import Path, Query, Request, Response
from pydantic import BaseModel, Field

from crawler.api.access import ADMIN, READ, control
from crawler.api.problems import problem_responses
from crawler.api.routes.v1 import resource
from crawler.frontier.message import CRAWL_ID
from crawler.service import CrawlView, NewCrawl, SeriesView
from crawler.service.inputs import CrawlRequest

CrawlId = Annotated[str, Path(pattern=CRAWL_ID.pattern, max_length=64, description="a crawl's id")]
CRAWLS_LIMIT = (1, 1_000)  # crawls in one answer, at least and at most

router = resource()


class NewCrawlIn(CrawlRequest):
    """A crawl to start: seeds and options."""

    seeds: list[Annotated[str, Field(min_length=1, max_length=2048)]] = Field(min_length=1, max_length=1000)


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


@router.post("/crawls", status_code=201, dependencies=ADMIN, response_model=CrawlOut)
async def create_crawl(body: NewCrawlIn, request: Request, response: Response) -> CrawlOut:
    """Start a crawl: record it, route its seeds; answers with its id."""
    view = await control(request).crawls.create(
        NewCrawl(body.seeds, body.label, body.priority, body.max_depth, body.max_pages, body.domains)
    )
    response.headers["Location"] = f"/v1/crawls/{view.id}"
    return CrawlOut.of(view)


@router.get("/crawls", dependencies=READ, response_model=CrawlList)
async def list_crawls(
    request: Request,
    state: Literal["running", "finished", "cancelled", "interrupted"] | None = None,
    limit: Annotated[int, Query(ge=CRAWLS_LIMIT[0], le=CRAWLS_LIMIT[1])] = 100,
    before: Annotated[
        str | None, Query(pattern=CRAWL_ID.pattern, max_length=64, description="only crawls listed after it")
    ] = None,
) -> CrawlList:
    """Crawls, newest first, `limit` at a time (`next` gives the older ones); `state` keeps those in it."""
    page = await control(request).crawls.page(state, limit, before)
    older = None
    if page.before is not None:
        query = {"before": page.before, "limit": limit, **({"state": state} if state else {})}
        older = f"/v1/crawls?{urlencode(query)}"
    return CrawlList(crawls=[CrawlOut.of(v) for v in page.crawls], next=older)


@router.get("/crawls/{crawl}", dependencies=READ, response_model=CrawlOut, responses=problem_responses(404))
async def get_crawl(crawl: CrawlId, request: Request) -> CrawlOut:
    """One crawl: state, counts per domain, credits, started, finished."""
    return CrawlOut.of(await control(request).crawls.get(crawl))


@router.get(
    "/crawls/{crawl}/series", dependencies=READ, response_model=SeriesOut, responses=problem_responses(404)
)
async def crawl_series(crawl: CrawlId, request: Request) -> SeriesOut:
    """Pages the crawl stored per domain over time, in at most 120 steps: its pages/s chart."""
    return SeriesOut.of(await control(request).crawls.series(crawl))


@router.post(
    "/crawls/{crawl}/cancel", dependencies=ADMIN, response_model=CrawlOut, responses=problem_responses(404)
)
async def cancel_crawl(crawl: CrawlId, request: Request) -> CrawlOut:
    """Cancel a crawl: once this answers, no consumer starts a fetch of it; its counts are final."""
    return CrawlOut.of(await control(request).crawls.cancel(crawl))


@router.delete("/crawls/{crawl}", status_code=204, dependencies=ADMIN, responses=problem_responses(404))
async def delete_crawl(crawl: CrawlId, request: Request, purge: bool = False) -> Response:
    """Forget a crawl (cancelled first if running); its pages stay unless `purge=true`."""
    await control(request).crawls.delete(crawl, purge)
    return Response(status_code=204)
