"""The API's routes under /v1, a router per resource."""

from fastapi import FastAPI

from crawler.api.routes import about, crawls, dead, domains, fleet, pages, quality, recrawls

_RESOURCES = (crawls, quality, domains, recrawls, pages, dead, fleet, about)


def include(app: FastAPI) -> None:
    """Serve every resource's routes from `app`."""
    for part in _RESOURCES:
        app.include_router(part.router)
