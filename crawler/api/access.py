"""What a route depends on: a bearer token of the scope it needs, and the service's Control."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from fastapi import Depends, Request

from crawler.api.problems import Refused
from crawler.api.security import Scope, Token, allows, authenticate
from crawler.service import Control


def need(scope: Scope) -> Callable[[Request], Awaitable[Token]]:
    """A dependency: the request's token, if it is valid and allows `scope` (else a 401 or 403)."""

    async def check(request: Request) -> Token:
        tokens: list[Token] = request.app.state.tokens
        header = request.headers.get("authorization", "")
        kind, _, presented = header.partition(" ")
        challenge = {"WWW-Authenticate": 'Bearer realm="crawler"'}
        if kind.lower() != "bearer" or not presented.strip():
            raise Refused(401, "Unauthorized", "send Authorization: Bearer <token>", challenge)
        token = authenticate(tokens, presented.strip())
        if token is None:
            raise Refused(401, "Unauthorized", "the token is not valid", challenge)
        if not allows(token, scope):
            raise Refused(403, "Forbidden", f"this needs a token of scope {scope}")
        return token

    return check


READ = [Depends(need("read"))]
ADMIN = [Depends(need("admin"))]


def control(request: Request) -> Control:
    """The app's Control, opened at start-up."""
    found: Control = request.app.state.control
    return found
