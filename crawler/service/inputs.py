"""What a person may ask of the fleet, checked by one model whether it comes from the command line or
the HTTP API: a new crawl's options, and the dead-letter filters."""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

DeadReason = Literal["transient", "invalid", "rejected", "delivery_limit", "webhook", "unknown"]
"""Why a message is in the dead queue: retries used up, unreadable, rejected, returned too often to a
quorum queue (its delivery limit), a webhook's receiver never took it, or not said."""
DEAD_REASONS: tuple[str, ...] = get_args(DeadReason)
DEAD_LIMIT = (1, 10_000)  # how many dead letters one listing may show, at least and at most
MAX_SEEDS = 100_000  # seeds of one crawl: a domains file's every home page (the API's body holds fewer)


class RecrawlRequest(BaseModel):
    """Stored pages to fetch again: those due (or, with `all`, every one) of `domains`."""

    model_config = ConfigDict(extra="forbid")
    domains: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        None, min_length=1, max_length=1000
    )
    all: bool = False


class CrawlRequest(BaseModel):
    """A crawl to start: seeds and options."""

    model_config = ConfigDict(extra="forbid")
    seeds: list[Annotated[str, Field(min_length=1, max_length=2048)]] = Field(
        min_length=1, max_length=MAX_SEEDS
    )
    label: str | None = Field(None, max_length=200)
    priority: int | None = Field(None, ge=0, le=9)
    max_depth: int | None = Field(None, ge=0, le=1_000_000)
    max_pages: int | None = Field(None, ge=1, le=1_000_000_000)
    domains: list[Annotated[str, Field(min_length=1, max_length=253)]] | None = Field(
        None, min_length=1, max_length=1000
    )
