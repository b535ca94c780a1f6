"""How each domain is faring with its site: back-off, recent answers by status class, robots.txt, and
whether the site is refusing the crawler; what the console's Domains view adds to a queue's depth."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from redis.asyncio import Redis

from crawler.config import CrawlConfig
from crawler.fetch.ratelimit import Backoff, RateLimiter, budget
from crawler.fetch.robots import RobotsState, held
from crawler.frontier.concurrency import together
from crawler.monitor.answers import WINDOW, Recent, recent
from crawler.names import Names

REFUSALS_RISING = 3  # 403s and 429s in the last minute, more than the minute before, that flag a domain
RobotsSummary = Literal["ok", "none", "unavailable", "unknown"]


@dataclass(frozen=True, slots=True)
class RobotsView:
    """A domain's robots.txt across its origins: the worst state held (unavailable, then ok, then
    none; unknown while none is held), how many origins, and the first unavailable one's reason."""

    state: RobotsSummary = "unknown"
    origins: int = 0
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class DomainHealth:
    """A domain's back-off, its answers of the last WINDOW seconds, robots.txt, and whether the site
    is refusing the crawler now (and why)."""

    backoff: Backoff = field(default_factory=Backoff)
    answers: Recent = field(default_factory=Recent)
    robots: RobotsView = field(default_factory=RobotsView)
    refused_why: str | None = None
    window: int = WINDOW


async def domain_health(
    redis: Redis, names: Names, config: CrawlConfig, domains: list[str]
) -> dict[str, DomainHealth]:
    """Each of `domains`' health, read from Redis in three round trips (none of it changed)."""
    budgets = {d: budget(config.rules_for(d), None) for d in domains}
    backoffs, answers, robots = await together(
        RateLimiter(redis, names).backoffs(budgets), recent(redis, names), held(redis, names)
    )
    by_domain: dict[str, list[RobotsState]] = {}
    for r in robots:
        host = r.origin.partition("://")[2].rsplit(":", 1)[0].strip("[]")
        chosen = config.domain_of(host)
        if chosen is not None:
            by_domain.setdefault(chosen, []).append(r)
    out = {}
    for d in domains:
        backoff, seen = backoffs.get(d, Backoff()), answers.get(d, Recent())
        out[d] = DomainHealth(backoff, seen, _robots(by_domain.get(d, [])), _refused(backoff, seen))
    return out


def _robots(states: list[RobotsState]) -> RobotsView:
    if not states:
        return RobotsView()
    down = [s for s in states if s.state == "unavailable"]
    if down:
        return RobotsView("unavailable", len(states), down[0].detail)
    return RobotsView("ok" if any(s.state == "ok" for s in states) else "none", len(states))


def _refused(backoff: Backoff, seen: Recent) -> str | None:
    """Why the site is refusing the crawler now, or None: it is held, or slowed, or 403s and 429s are
    rising."""
    if backoff.held > 0:
        return f"held for {backoff.held:.0f} s more (the site asked for a pause)"
    if backoff.factor < 1:
        return f"back-off: 1/{round(1 / backoff.factor)} of its rate"
    before, last = seen.refusals
    if last >= REFUSALS_RISING and last > before:
        return f"403/429 rising: {last} in the last minute, {before} in the one before"
    return None
