"""Errors as RFC 9457 problem details: the body, the schema routes declare, and the handlers that turn
a refusal, a CrawlerError, an invalid request or an HTTP error into one."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from crawler.errors import (
    BadURL,
    ConfigError,
    Conflict,
    CrawlerError,
    NotFound,
    ServiceUnavailable,
    SinkError,
)

PROBLEM = "application/problem+json"
_STATUS = {
    NotFound: 404,
    Conflict: 409,
    BadURL: 422,
    ConfigError: 422,
    ServiceUnavailable: 503,
    SinkError: 503,
}
_TITLES = {404: "Not Found", 409: "Conflict", 422: "Unprocessable Content", 503: "Service Unavailable"}


class Problem(BaseModel):
    """An error, as RFC 9457 problem details."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str | None = None


class Refused(Exception):
    """A request refused before its route ran (no token, or not the scope it needs)."""

    def __init__(self, status: int, title: str, detail: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(title)
        self.status, self.title, self.detail, self.headers = status, title, detail, headers


def problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI responses of a route that may answer with a problem of one of `codes`."""
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


def answer_problems(app: FastAPI) -> None:
    """Make `app` answer every error it raises or meets as problem+json."""

    @app.exception_handler(Refused)
    async def refused(_: Request, exc: Refused) -> JSONResponse:
        return problem(exc.status, exc.title, exc.detail, exc.headers)

    @app.exception_handler(CrawlerError)
    async def crawler_error(_: Request, exc: CrawlerError) -> JSONResponse:
        status = next((s for t, s in _STATUS.items() if isinstance(exc, t)), 500)
        return problem(status, _TITLES.get(status, "Internal Server Error"), str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()))
        return problem(422, "Unprocessable Content", f"{where}: {first.get('msg', 'invalid')}")

    @app.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> JSONResponse:
        return problem(exc.status_code, str(exc.detail), None, dict(exc.headers or {}))
