"""Request bodies over MAX_BODY_BYTES refused with a 413, whether declared or streamed."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as ASGIScope

from crawler.api import console
from crawler.api.problems import problem

MAX_BODY_BYTES = 64 * 1024


class LimitBody:
    """Refuses request bodies over MAX_BODY_BYTES with a 413, whether declared or streamed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
            return await _refuse(send)
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > MAX_BODY_BYTES and not refused:
                    refused = True
                    if not started:
                        await _refuse(send)
                    return {"type": "http.disconnect"}  # the app stops reading; its answer is dropped
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        await self.app(scope, counted, tracked)


async def _refuse(send: Send) -> None:
    response = problem(413, "Content Too Large", f"request bodies are limited to {MAX_BODY_BYTES} bytes")
    # Sent from outside the app's middleware: the headers every other answer gets, given here.
    for name, value in console.SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    await response({"type": "http"}, _nothing, send)


async def _nothing() -> Message:
    return {"type": "http.disconnect"}
