"""The two renderings of an answer (docs/gateway.md): the target's own (raw: its status, type and
body, what it cost and where it came from in Gateway-* headers) and the JSON envelope
(json_response=true). The gateway's own answers are alike in both: a JSON error and Gateway-Error."""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from crawler.errors import FetchError
from crawler.fetch.api import GATEWAY_ERROR
from crawler.gateway.answer import Failed, GatewayAnswer, Page, Refusal, Rest

log = logging.getLogger("crawler.gateway")

# The raw form's headers. A target's answer always has the first five and never ERROR; the gateway's
# own answers (both forms) always have ERROR and none of the others. A target's own headers with
# the prefix are not passed on, so a target cannot pass for the gateway.
PREFIX = "gateway-"
CREDITS = "Gateway-Credits"
EXIT = "Gateway-Exit"
FINAL_URL = "Gateway-Final-Url"
INITIAL_STATUS = "Gateway-Initial-Status-Code"
RENDERED = "Gateway-Rendered"
ERROR = GATEWAY_ERROR

# The raw form's status for a target that could not be fetched, by kind; any other kind is a 502.
FAILED_STATUS = {"timeout": 504, "refused": 403}
# The target's headers not passed on: its connection's and framing (the gateway frames the body
# anew, decoded), and those that would act on the client's connection to the gateway itself; nor
# any named with these prefixes.
NOT_RELAYED = frozenset(
    {
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "content-length",
        "content-encoding",
        "alt-svc",
        "strict-transport-security",
    }
)
NOT_RELAYED_PREFIXES = (PREFIX, "proxy-")

Form = Callable[[GatewayAnswer, web.Request], Awaitable[web.StreamResponse]]


def refused(refusal: Refusal) -> web.Response:
    """The gateway's own answer, the same in both forms."""
    response = _error(refusal.status, refusal.kind, refusal.message)
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = str(refusal.retry_after)
    return response


async def envelope(outcome: GatewayAnswer, _: web.Request) -> web.StreamResponse:
    """The JSON envelope: status 200 for whatever the target did, its answer or failure inside."""
    if isinstance(outcome, Refusal):
        return refused(outcome)
    if isinstance(outcome, Failed):
        return web.json_response(
            {
                "status_code": outcome.status,
                "error": {"kind": outcome.kind, "message": outcome.message[:500]},
                "credits_used": 0,
                "duration_ms": _since(outcome.started),
            }
        )
    assert outcome.rest is None, "the envelope's bodies are read whole"
    try:
        text, encoding = outcome.head.decode("utf-8"), "text"
    except UnicodeDecodeError:
        text, encoding = base64.b64encode(outcome.head).decode("ascii"), "base64"
    body: dict[str, Any] = {
        "status_code": outcome.status,
        "headers": outcome.headers,
        "body": text,
        "body_encoding": encoding,
        "final_url": outcome.final_url,
        "credits_used": outcome.credits,
        "duration_ms": _since(outcome.started),
        "exit": outcome.exit,
        "rendered": outcome.rendered,
    }
    if outcome.document is not None:
        body["document"] = base64.b64encode(outcome.document).decode("ascii")
    return web.json_response(body)


async def raw(outcome: GatewayAnswer, request: web.Request) -> web.StreamResponse:
    """The target's own answer, byte for byte, a long body streamed; or the gateway's, marked."""
    if isinstance(outcome, Refusal):
        return refused(outcome)
    if isinstance(outcome, Failed):
        return _error(FAILED_STATUS.get(outcome.kind, 502), outcome.kind, outcome.message[:500])
    headers = _headers(outcome)
    if outcome.rest is None:
        return web.Response(status=outcome.status, body=outcome.head, headers=headers)
    return await _stream(
        request, web.StreamResponse(status=outcome.status, headers=headers), outcome.head, outcome.rest
    )


def _headers(page: Page) -> CIMultiDict[str]:
    headers = CIMultiDict(
        (k, v)
        for k, v in page.headers
        if k.lower() not in NOT_RELAYED and not k.lower().startswith(NOT_RELAYED_PREFIXES)
    )
    headers[CREDITS] = f"{page.credits:g}"
    headers[EXIT] = page.exit
    headers[FINAL_URL] = page.final_url
    headers[INITIAL_STATUS] = str(page.initial_status)
    headers[RENDERED] = "true" if page.rendered else "false"
    return headers


async def _stream(
    request: web.Request, response: web.StreamResponse, head: bytes, rest: Rest
) -> web.StreamResponse:
    """Pass a long body on as it comes, within the request's deadline. Cut short (the cap passed,
    the target or the client gone, the deadline), the connection is dropped before the body's
    end, so no client takes it for whole, and it is not charged."""
    await response.prepare(request)
    whole = False
    sent = 0
    try:
        async with asyncio.timeout(max(rest.deadline - time.monotonic(), 0)):
            await response.write(head)
            sent = len(head)
            async for piece in rest:
                await response.write(piece)
                sent += len(piece)
        whole = True
    except (TimeoutError, FetchError, aiohttp.ClientError, OSError) as exc:
        why = "the deadline passed" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
        log.info(
            "%s: body cut after %d bytes (%s), not charged", request.query.get("url", "?")[:200], sent, why
        )
    finally:
        await rest.finish(whole)
    if whole:
        await response.write_eof()
    elif request.transport is not None:
        request.transport.abort()
    return response


def _error(status: int, kind: str, message: str) -> web.Response:
    response = web.json_response({"error": message}, status=status)
    response.headers[ERROR] = kind
    return response


def _since(started: float) -> float:
    return round((time.monotonic() - started) * 1000, 1)
