"""A page's checks before its fetch in one Redis round trip: its crawl not cancelled, its counts
against max_pages, and its rate token.

The same checks, the same keys and the same order as asked one by one (crawler.frontier.crawls,
crawler.frontier.quota, crawler.fetch.ratelimit); only the round trips are fewer. A page whose
robots.txt verdict is not at hand, or whose domain has a credit limit (read between the counts and
the token), is checked one by one instead. Pages arriving together (the broker sends deliveries in
bursts) share one pipelined write: each script stays its own atomic step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from crawler.config import Rules
from crawler.errors import FetchError
from crawler.fetch.ratelimit import HORIZON, TAKE, TAKE_ARGS, TAKE_PAIR, RateLimiter, budget
from crawler.fetch.robots import Robots
from crawler.names import Names
from crawler.worker.addresses import Addresses
from crawler.worker.page import Admitted

# Runs before TAKE and returns early when the page is not to be fetched, so a refused page takes no
# token. KEYS[1] the bucket (TAKE's), KEYS[2] the cancelled crawls, KEYS[3] the domain's page count,
# KEYS[4] the crawl's. ARGV[1..TAKE_ARGS] TAKE's, then the crawl id ('' none), '1' to count the page,
# the domain's max_pages and the crawl's ('' none). Before TAKE_PAIR (`per_ip:`), the address's
# bucket is a fifth key and its arguments follow.
_CHECKS = (
    f"""
local crawl, count = ARGV[{TAKE_ARGS + 1}], ARGV[{TAKE_ARGS + 2}]
local max_pages, crawl_max_pages = ARGV[{TAKE_ARGS + 3}], ARGV[{TAKE_ARGS + 4}]
"""
    + """
if crawl ~= '' and redis.call('SISMEMBER', KEYS[2], crawl) == 1 then return {-1, '0'} end
if count == '1' then
  if redis.call('INCR', KEYS[3]) > tonumber(max_pages) then return {-2, '0'} end
  if crawl_max_pages ~= '' and redis.call('INCR', KEYS[4]) > tonumber(crawl_max_pages) then
    return {-3, '0'}
  end
end
"""
)
_ADMIT = _CHECKS + TAKE
_ADMIT_PAIR = _CHECKS + TAKE_PAIR

CANCELLED, DOMAIN_FULL, CRAWL_FULL = -1, -2, -3

_Waiting = tuple[AsyncScript, list[str], list[Any], "asyncio.Future[Any]"]
"""A page's check waiting to be sent: its script, keys, arguments, and where its answer goes."""

Held = Literal["cancelled", "max_pages", "crawl_max_pages"]
_HELD: dict[int, Held] = {CANCELLED: "cancelled", DOMAIN_FULL: "max_pages", CRAWL_FULL: "crawl_max_pages"}


@dataclass(frozen=True, slots=True)
class Checked:
    """What a page's admission found: why it is held (then no token was taken), or its token."""

    held: Held | None = None
    admitted: Admitted | None = None

    @property
    def cleared_now(self) -> bool:
        """Granted with no wait: the cancel check and the token were one atomic step."""
        return self.admitted is not None and self.admitted.taken[0] == 1 and self.admitted.taken[1] <= 0


class Admission:
    """Runs a page's checks before its fetch in one script, where they can be."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        limiter: RateLimiter,
        robots: Robots,
        rules_of: Callable[[str], Rules],
        now_only: Callable[[str], bool] = lambda domain: False,
        addresses: Addresses | None = None,
    ) -> None:
        """`now_only(domain)`: grant its pages only a token due now, never one reserved ahead (a
        discovered host's page waits out of its shard instead: crawler/frontier/hosts.py).
        `addresses`: a page's token comes with its address's (`per_ip:`), in the same script."""
        self._names = names
        self._addresses = addresses
        self._now_only = now_only
        self._limiter = limiter
        self._robots = robots
        self._rules_of = rules_of  # the live rules, as the visit's own token would ask them
        self._redis = redis
        self._admit = redis.register_script(_ADMIT)
        self._admit_pair = redis.register_script(_ADMIT_PAIR)
        self._waiting: list[_Waiting] = []
        self._sender: asyncio.Task[None] | None = None

    async def check(
        self,
        url: str,
        domain: str,
        rules: Rules,
        *,
        crawl: str | None,
        cancellable: bool,
        count: bool,
        crawl_max_pages: int | None,
    ) -> Checked | None:
        """The page's checks in one round trip; None when they must be asked one by one.

        `cancellable`: look up whether `crawl` is cancelled. `count`: count the page against the
        domain's max_pages in `crawl` and, if `crawl_max_pages` is set, against the crawl's own.
        """
        crawl_delay = None
        if rules.obey_robots:
            verdict = self._robots.cached(url)
            if verdict is None or not verdict.allowed:
                return None  # fetching robots.txt, or a page it keeps out, goes the long way
            crawl_delay = verdict.crawl_delay
        if rules.max_credits is not None:
            return None
        try:
            share = None if self._addresses is None else await self._addresses.share(url)
        except FetchError:
            return None  # its visit fails with the same error, from the fleet's DNS cache
        names = self._names.for_crawl(crawl)
        horizon = 0.0 if self._now_only(domain) else HORIZON
        allowance = budget(self._rules_of(domain), crawl_delay)
        if share is None:
            take_keys, take_args = self._limiter.take_args(domain, allowance, horizon)
        else:
            take_keys, take_args = self._limiter.take_pair_args(domain, allowance, *share, horizon)
        crawl_pages = self._names.crawl_pages_key(crawl) if crawl is not None else self._names.cancelled_key
        keys = [take_keys[0], self._names.cancelled_key, names.pages_key(domain), crawl_pages, *take_keys[1:]]
        args: list[str | int | float] = [
            *take_args[:TAKE_ARGS],
            crawl if cancellable and crawl is not None else "",
            "1" if count else "0",
            rules.max_pages,
            crawl_max_pages if crawl is not None and crawl_max_pages is not None else "",
            *take_args[TAKE_ARGS:],
        ]
        script = self._admit if share is None else self._admit_pair
        # Its token is due `wait` after the script ran, which is after it was asked for and maybe
        # long before this task resumes: reckoned from the ask, a late request is never missed.
        asked = time.monotonic()
        grant, wait, *factor = await self._run(script, keys, args)  # a held page has no factor
        if int(grant) < 0:
            return Checked(held=_HELD[int(grant)])
        return Checked(admitted=Admitted((int(grant), float(wait)), crawl_delay, asked, float(factor[0])))

    async def _run(self, script: AsyncScript, keys: list[str], args: list[Any]) -> Any:
        """Run `script` with those of other pages checked in the same loop turn."""
        answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((script, keys, args, answer))
        if self._sender is None:
            self._sender = asyncio.create_task(self._send())
        return await asyncio.shield(answer)

    async def _send(self) -> None:
        try:
            while self._waiting:
                await asyncio.sleep(0)  # pages checked in the same loop turn join this write
                group, self._waiting = self._waiting, []
                try:
                    answers = await self._pipelined(group)
                except Exception as exc:
                    answers = [exc] * len(group)
                for (_, _, _, answer), result in zip(group, answers, strict=True):
                    if answer.done():
                        continue
                    if isinstance(result, Exception):
                        answer.set_exception(result)
                    else:
                        answer.set_result(result)
        finally:
            self._sender = None

    async def _pipelined(self, group: list[_Waiting]) -> list[Any]:
        if len(group) == 1:
            script, keys, args, _ = group[0]
            return [await script(keys=keys, args=args)]
        # EVALSHA queued directly: redis-py would ask SCRIPT EXISTS before every pipeline of scripts.
        pipe = self._redis.pipeline(transaction=False)
        for script, keys, args, _ in group:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
        answers: list[Any] = await pipe.execute(raise_on_error=False)
        for i, answer in enumerate(answers):
            if isinstance(answer, NoScriptError):  # not run (a restarted Redis): load it and run it
                script, keys, args, _ = group[i]
                answers[i] = await script(keys=keys, args=args)
        return answers
