"""The web console: plain HTML, CSS and JavaScript shipped in the package, served by crawler-api at `/`
(the page) and `/console/` (its files), under a Content-Security-Policy that allows nothing else."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from starlette.staticfiles import StaticFiles

STATIC = Path(__file__).parent / "static"
# Scripts, styles and requests only from this server; no inline script or style, no frames, no form
# posts (the page sends its forms with fetch, and the token in a header).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}

_CACHED = {"Cache-Control": "public, max-age=86400"}


def mount(app: FastAPI) -> None:
    """Serve the console's page at `/` and its files under `/console/` (neither needs a token: they
    hold no data; every number comes from /v1 with the token the person enters)."""

    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def icon() -> FileResponse:
        # Browsers ask for /favicon.ico whatever the page says; an SVG under that name is one they draw.
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml", headers=_CACHED)

    app.add_api_route("/", page, methods=["GET"], include_in_schema=False)
    app.add_api_route("/favicon.ico", icon, methods=["GET"], include_in_schema=False)
    app.mount("/console", StaticFiles(directory=STATIC), name="console")
