"""/v1/dead: dead letters paged and summed up (the queue left as it was), replayed or purged."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import Query, Request
from pydantic import BaseModel

from crawler.api.access import ADMIN, READ, control
from crawler.api.routes.v1 import resource
from crawler.service.inputs import DEAD_LIMIT, DeadReason

DomainFilter = Annotated[str | None, Query(max_length=253, description="this domain and its subdomains")]
ReasonFilter = Annotated[DeadReason | None, Query()]

router = resource()


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


class Counted(BaseModel):
    """How many messages an action took."""

    count: int


@router.get("/dead", dependencies=READ, response_model=DeadList)
async def list_dead(
    request: Request,
    domain: DomainFilter = None,
    reason: ReasonFilter = None,
    limit: Annotated[int, Query(ge=DEAD_LIMIT[0], le=DEAD_LIMIT[1])] = 100,
    after: Annotated[int, Query(ge=0, description="where this page starts: the last page's `next`")] = 0,
) -> DeadList:
    """Dead letters, oldest first, a page at a time (never the whole queue in one call); the queue is
    left as it was."""
    page = await control(request).dead.page(domain, reason, limit, after)
    return DeadList(dead=[DeadLetterOut(**asdict(letter)) for letter in page.letters], next=page.next)


@router.get("/dead/summary", dependencies=READ, response_model=DeadSummary)
async def dead_summary(request: Request) -> DeadSummary:
    """Every dead letter counted by domain and reason, most first; the queue is left as it was."""
    groups = await control(request).dead.groups()
    return DeadSummary(groups=[DeadGroupOut(**asdict(g)) for g in groups], total=sum(g.count for g in groups))


@router.post("/dead/replay", dependencies=ADMIN, response_model=Counted)
async def replay_dead(request: Request, domain: DomainFilter = None, reason: ReasonFilter = None) -> Counted:
    """Put matching dead letters back into their domain queues, attempts reset."""
    return Counted(count=await control(request).dead.replay(domain, reason))


@router.delete("/dead", dependencies=ADMIN, response_model=Counted)
async def purge_dead(request: Request, domain: DomainFilter = None, reason: ReasonFilter = None) -> Counted:
    """Delete matching dead letters for good."""
    return Counted(count=await control(request).dead.purge(domain, reason))
