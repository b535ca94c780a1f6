"""What every resource's router shares: the /v1 prefix, and the problems any of its routes may answer."""

from fastapi import APIRouter

from crawler.api.problems import problem_responses


def resource() -> APIRouter:
    """A router for one resource's routes under /v1."""
    # The prefix is the router's own, not given where it is included: a route's path, the metrics'
    # label, is then the whole path.
    return APIRouter(prefix="/v1", responses=problem_responses(401, 403, 413, 422, 503))
