"""/v1/domains: every configured domain's queue, rates, answers and robots.txt; pause and resume."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Path, Request
from pydantic import BaseModel

from crawler.api.access import ADMIN, READ, control
from crawler.api.problems import problem_responses
from crawler.api.routes.v1 import resource
from crawler.frontier.concurrency import together
from crawler.service import DomainView

Domain = Annotated[str, Path(min_length=1, max_length=253)]

router = resource()


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


class QueuesOut(BaseModel):
    """Queues of one kind summed (the host layout's shards, or its wait queues); `name` says how many."""

    name: str
    ready: int
    unacked: int | None
    consumers: int


class TopHostOut(BaseModel):
    """A discovered host and its URLs queued, not yet at an outcome."""

    host: str
    queued: int


class DiscoveredOut(BaseModel):
    """Hosts found by links (`discover: follow: all`) in aggregate, never a row per host: known
    (admitted), active (a page stored within a minute), waiting (URLs out of their shard), parked
    (DNS), their queues summed, and the hosts with the most URLs queued."""

    follow: bool
    known: int
    active: int
    waiting: int
    parked: int
    shards: QueuesOut
    waits: QueuesOut
    top: list[TopHostOut]
    crawls: int
    listed: int = 0  # a domains file's domains the host layout serves


class DomainList(BaseModel):
    """Every configured domain, and the discovered hosts in one summary."""

    domains: list[DomainOut]
    discovered: DiscoveredOut | None = None


@router.get("/domains", dependencies=READ, response_model=DomainList)
async def list_domains(request: Request) -> DomainList:
    """Every configured domain: queue depth, rate, paused, workers; discovered hosts summed."""
    domains = control(request).domains
    listed, hosts = await together(domains.listed(), domains.discovered())
    return DomainList(
        domains=[DomainOut.of(d) for d in listed], discovered=DiscoveredOut.model_validate(hosts)
    )


@router.post(
    "/domains/{domain}/pause", dependencies=ADMIN, response_model=DomainOut, responses=problem_responses(404)
)
async def pause_domain(domain: Domain, request: Request) -> DomainOut:
    """Pause a domain fleet-wide within a second; its queued messages wait, untouched."""
    domains = control(request).domains
    chosen = await domains.pause(domain)
    return next(DomainOut.of(d) for d in await domains.listed() if d.domain == chosen)


@router.post(
    "/domains/{domain}/resume",
    dependencies=ADMIN,
    response_model=DomainOut,
    responses=problem_responses(404),
)
async def resume_domain(domain: Domain, request: Request) -> DomainOut:
    """Resume a paused domain fleet-wide."""
    domains = control(request).domains
    chosen = await domains.resume(domain)
    return next(DomainOut.of(d) for d in await domains.listed() if d.domain == chosen)
