"""/v1/fleet: workers by heartbeat, crawler-gateway replicas with their exits and keys, freshness."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from fastapi import Request
from pydantic import BaseModel

from crawler.api.access import READ, control
from crawler.api.routes.v1 import resource
from crawler.service import FleetView

router = resource()


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


def _fields(source: Any, model: type[BaseModel]) -> dict[str, Any]:
    """The fields of `source` that `model` has and is not given otherwise."""
    taken = {"state", "age", "exits", "keys"}
    return {k: getattr(source, k) for k in model.model_fields if k not in taken and hasattr(source, k)}


@router.get("/fleet", dependencies=READ, response_model=FleetOut)
async def fleet(request: Request) -> FleetOut:
    """Workers by heartbeat, crawler-gateway replicas with their exits and keys, freshness per domain."""
    return FleetOut.of(await control(request).fleet.view())
