"""The API itself: its index, health probes and metrics, and the token a request was made with."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel

from crawler.api.access import READ, control, need
from crawler.api.routes.v1 import resource
from crawler.api.security import Token

router = resource()


class WhoAmI(BaseModel):
    """The token this request was made with: its name and scope (never its secret)."""

    name: str
    scope: Literal["read", "admin"]


class Index(BaseModel):
    """Where things are: the console, the API's schema, and its health probe."""

    console: str
    openapi: str
    healthz: str


class Health(BaseModel):
    """Liveness, or readiness with each service's state."""

    status: Literal["ok", "unavailable"]
    services: dict[str, str] = {}


@router.get("/whoami", response_model=WhoAmI)
async def whoami(token: Annotated[Token, Depends(need("read"))]) -> WhoAmI:
    """The token this request was made with: its name and scope."""
    return WhoAmI(name=token.name, scope=token.scope)


@router.get("", response_model=Index)
async def index() -> Index:
    """The API's base: links to the console and the schema. Open, so a person who opens it is not lost."""
    return Index(console="/", openapi="/openapi.json", healthz="/v1/healthz")


@router.get("/healthz", response_model=Health)
async def healthz() -> Health:
    """Liveness: the API answers. Open, for probes."""
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
async def readyz(request: Request) -> JSONResponse:
    """Readiness: RabbitMQ, Redis and the database reachable (503 if one is not). Open, for probes."""
    services = await control(request).fleet.readiness()
    ok = all(v == "ok" for v in services.values())
    body = Health(status="ok" if ok else "unavailable", services=services)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get(
    "/metrics",
    dependencies=READ,
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}}},
)
async def metrics(request: Request) -> Response:
    """The API's Prometheus metrics (requests by route and status)."""
    return Response(generate_latest(request.app.state.registry), media_type=CONTENT_TYPE_LATEST)
