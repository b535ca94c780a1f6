"""The HTTP API app: the routes under /v1 (crawler.api.routes) and the console, over crawler.service;
errors as problem+json, requests counted, bodies limited."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram

from crawler.api import console, routes
from crawler.api.limits import LimitBody
from crawler.api.problems import Problem, answer_problems
from crawler.api.security import Token
from crawler.config import CrawlConfig
from crawler.service import Control
from crawler.settings import Settings


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
    routes.include(app)
    console.mount(app)
    _describe(app)
    answer_problems(app)
    _count_requests(app)
    app.add_middleware(LimitBody)
    return app


def _describe(app: FastAPI) -> None:
    """Serve the schema with the Problem body and the bearer scheme in it, made once when first asked."""
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


def _count_requests(app: FastAPI) -> None:
    """Count requests and time them by route in the app's own registry; give each answer the security
    headers."""
    registry = CollectorRegistry()
    app.state.registry = registry
    requests = Counter("crawler_api_requests", "API requests", ["route", "status"], registry=registry)
    seconds = Histogram("crawler_api_request_seconds", "API request time", ["route"], registry=registry)

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
