"""/v1/recrawls: publish the stored pages that are due (or all of them) into their queues now."""

from __future__ import annotations

from fastapi import Request
from pydantic import BaseModel

from crawler.api.access import ADMIN, control
from crawler.api.routes.v1 import resource
from crawler.service.inputs import RecrawlRequest

router = resource()


class RecrawlOut(BaseModel):
    """What a recrawl published per domain now, and what stays due (published as room allows)."""

    published: dict[str, int]
    due: dict[str, int]


@router.post("/recrawls", dependencies=ADMIN, response_model=RecrawlOut)
async def recrawl(body: RecrawlRequest, request: Request) -> RecrawlOut:
    """Publish the stored pages that are due (with `all`: every one, due or not) into their queues."""
    done = await control(request).recrawls.recrawl(body.domains, body.all)
    return RecrawlOut(published=done.published, due=done.due)
