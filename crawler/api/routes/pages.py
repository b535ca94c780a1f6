"""/v1/pages: a stored page by its URL, its archived answer, its versions."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import Path, Query, Request, Response
from pydantic import BaseModel, Field

from crawler.api.access import READ, control
from crawler.api.problems import problem_responses
from crawler.api.routes.v1 import resource
from crawler.service import VersionsView
from crawler.sink.history import PageState, StoredVersion

VERSIONS_LIMIT = (1, 1_000)  # versions of a page in one answer, at least and at most
MAX_ID = 2**63 - 1  # the database's ids and numbers are 64-bit at most
PageUrl = Annotated[str, Query(min_length=1, max_length=8192, description="the page's URL")]
PageId = Annotated[int, Path(ge=1, le=MAX_ID, description="a page's id")]

router = resource()


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


@router.get("/pages", dependencies=READ, response_model=PageOut, responses=problem_responses(404))
async def get_page(url: PageUrl, request: Request) -> PageOut:
    """The stored page at `url` (canonicalised as the crawler stores it): its latest state."""
    return PageOut.of(await control(request).pages.at(url))


@router.get(
    "/pages/{page}/archived",
    dependencies=READ,
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}}, **problem_responses(404)},
)
async def get_archived(page: PageId, request: Request) -> Response:
    """The page's latest answer as the WARC archive holds it (in object storage: one ranged GET): its
    payload, with the site's status, date and Content-Type in `Crawler-Archived-*` headers."""
    found = await control(request).pages.archived(page)
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


@router.get(
    "/pages/{page}/versions", dependencies=READ, response_model=VersionList, responses=problem_responses(404)
)
async def list_versions(
    page: PageId,
    request: Request,
    before: Annotated[int | None, Query(ge=1, le=MAX_ID, description="only versions numbered below")] = None,
    limit: Annotated[int, Query(ge=VERSIONS_LIMIT[0], le=VERSIONS_LIMIT[1])] = 100,
) -> VersionList:
    """A page's versions, newest first, `limit` at a time; `next` gives the older ones."""
    return VersionList.of(await control(request).pages.versions(page, before, limit), limit)
