"""/v1/crawls/{crawl}/quality and /v1/quality/alerts: coverage tables, failed expectations and the
alerts they raise (docs/quality.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from pydantic import BaseModel

from crawler.api.access import READ, control
from crawler.api.problems import problem_responses
from crawler.api.routes.crawls import CrawlId
from crawler.api.routes.v1 import resource
from crawler.quality.report import alerts_json

router = resource()


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


@router.get(
    "/crawls/{crawl}/quality", dependencies=READ, response_model=QualityOut, responses=problem_responses(404)
)
async def crawl_quality(
    crawl: CrawlId,
    request: Request,
    domain: Annotated[str | None, Query(max_length=253, description="only this domain")] = None,
) -> QualityOut:
    """The crawl's field coverage and failed expectations per domain, beside the last finished crawl."""
    report = await control(request).crawls.quality(crawl, domain)
    return QualityOut.model_validate(report.to_json())


@router.get("/quality/alerts", dependencies=READ, response_model=CoverageAlerts)
async def quality_alerts(request: Request) -> CoverageAlerts:
    """The current coverage alerts: the console's red markers, and `crawler status`'s lines."""
    return CoverageAlerts.model_validate(
        {"alerts": alerts_json(await control(request).crawls.current_quality())}
    )
