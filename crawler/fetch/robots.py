"""robots.txt (RFC 9309), fetched once per origin per TTL and shared by the fleet through Redis.

Only the site's answers are verdicts, cached: a 2xx is read (its first 500 KiB), a 4xx allows all,
a 5xx or an unreachable site (no connection, a timeout) disallows all for ROBOTS_ERROR_TTL. A fetch
the crawler refused (the private-network guard) or could not make (the fetch service's own failure)
is no answer: nothing is cached, and the next check asks again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

from protego import Protego
from redis.asyncio import Redis
from redis.asyncio.lock import Lock
from redis.exceptions import LockError

from crawler.config import Rules
from crawler.errors import (
    BackendHalt,
    FetchBackendError,
    FetchError,
    NoSuchHost,
    Refused,
    ResolveFailed,
)
from crawler.fetch.fetcher import Fetcher, Hop, follow
from crawler.names import ROBOTS_ERROR_TTL, ROBOTS_LOCK_TTL, ROBOTS_TTL, Names

LOCAL_TTL = 30.0  # seconds a worker trusts its own parsed copy before asking Redis again
MAX_ROBOTS_BYTES = 500 * 1024  # RFC 9309 2.5: the first 500 KiB are parsed, the rest ignored


@dataclass(frozen=True, slots=True)
class Verdict:
    """May a URL be fetched, how slowly; if robots.txt could not be had, why: `unavailable` for now
    (try again later), or `refused`: why the crawler will not fetch from that origin (its config)."""

    allowed: bool
    crawl_delay: float | None = None
    unavailable: str | None = None
    refused: FetchError | None = None


@dataclass(frozen=True, slots=True)
class _Policy:
    parser: Protego | None  # None: allow all (no usable robots.txt)
    unavailable: str | None  # set: disallow everything for now (5xx, unreachable)
    refused: FetchError | None = None  # set: disallow everything, the fetch was refused (never cached)


def origin_of(url: str) -> str:
    """scheme://host[:port] of a URL: robots.txt applies per origin."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


class Robots:
    """Answers whether the crawler may fetch a URL."""

    def __init__(
        self,
        redis: Redis,
        names: Names,
        fetcher: Fetcher,
        user_agent: str,
        *,
        lock_ttl: float = ROBOTS_LOCK_TTL,
    ) -> None:
        self._redis = redis
        self._lock_ttl = lock_ttl
        self._names = names
        self._fetcher = fetcher
        self._agent = user_agent.split("/")[0].strip() or "*"
        # Oldest first: a crawl of the open web meets ever more origins, and each parsed copy is
        # over a kilobyte, so copies past LOCAL_TTL are dropped as new ones come (Redis keeps them).
        self._local: OrderedDict[str, tuple[float, _Policy]] = OrderedDict()

    async def check(self, url: str, rules: Rules, hop: Hop) -> Verdict:
        """The verdict for `url`; `hop` clears each request for robots.txt (they are requests too)."""
        return self._verdict(url, await self._policy(origin_of(url), rules, hop))

    async def sitemaps(self, origin: str, rules: Rules, hop: Hop) -> list[str]:
        """The sitemaps an origin's robots.txt names (its `Sitemap:` lines), as written; FetchError
        (transient) while robots.txt is unavailable."""
        policy = await self._policy(origin, rules, hop)
        if policy.refused is not None:
            raise Refused(f"robots.txt not fetched: {policy.refused}")
        if policy.unavailable is not None:
            raise FetchError(policy.unavailable)  # transient
        return list(policy.parser.sitemaps) if policy.parser is not None else []

    def cached(self, url: str) -> Verdict | None:
        """The verdict `check` would give from this worker's own copy, without I/O; None if it has none."""
        cached = self._local.get(origin_of(url))
        if cached is None or cached[0] <= time.monotonic():
            return None
        return self._verdict(url, cached[1])

    def _verdict(self, url: str, policy: _Policy) -> Verdict:
        if policy.refused is not None:
            return Verdict(False, refused=policy.refused)
        if policy.unavailable is not None:
            return Verdict(False, unavailable=policy.unavailable)
        if policy.parser is None:
            return Verdict(True)
        delay = policy.parser.crawl_delay(self._agent)
        return Verdict(bool(policy.parser.can_fetch(url, self._agent)), float(delay) if delay else None)

    async def _policy(self, origin: str, rules: Rules, hop: Hop) -> _Policy:
        cached = self._local.get(origin)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        key = self._names.robots_key(origin)
        # Token-checked: a holder whose fetch outlived the TTL cannot release a successor's lock.
        # A holder that died leaves a lock that expires, after which a waiter takes it and fetches.
        lock = Lock(
            self._redis,
            self._names.robots_lock_key(origin),
            timeout=self._lock_ttl,
            blocking=False,
            thread_local=False,
        )
        while (raw := await self._redis.get(key)) is None:
            if await lock.acquire():
                try:
                    fetched = await self._fetch(origin, rules, hop)
                    if isinstance(fetched, _Policy):  # no answer of the site's: no verdict, here or in Redis
                        return fetched
                    raw, ttl = fetched
                    await self._redis.set(key, raw, ex=ttl)
                finally:
                    # Expired, and maybe taken by another worker: no longer ours to delete.
                    with contextlib.suppress(LockError):
                        await lock.release()
                break
            await asyncio.sleep(0.05)
        policy = _parse(raw)
        now = time.monotonic()
        self._local[origin] = (now + LOCAL_TTL, policy)
        self._local.move_to_end(origin)
        while next(iter(self._local.values()))[0] <= now:
            self._local.popitem(last=False)
        return policy

    async def _fetch(self, origin: str, rules: Rules, hop: Hop) -> tuple[bytes, int] | _Policy:
        """robots.txt's policy as cached, and for how long; or, when the site gave no answer, the
        policy for this check alone (never cached)."""
        robots_rules = rules.model_copy(update={"max_body_bytes": MAX_ROBOTS_BYTES, "max_redirects": 5})
        try:
            # RFC 9309: follow at least five redirects; each hop is paced like any request.
            response = await follow(
                self._fetcher, f"{origin}/robots.txt", robots_rules, hop, html_only=False, head=True
            )
        except BackendHalt:
            raise  # the fetch service refuses us: the domain halts, robots.txt is not to blame
        except FetchBackendError as exc:  # the fetch service failed, not the site: ask again next time
            if exc.transient:
                return _Policy(None, f"robots.txt not fetched: {exc}")
            return _Policy(None, None, exc)
        except (Refused, NoSuchHost) as exc:
            if exc.status_code is None:  # refused before the site said anything (guard, scope, name)
                return _Policy(None, None, exc)
            return json.dumps({"allow": True}).encode(), ROBOTS_TTL  # a redirect nowhere: unavailable
        except ResolveFailed as exc:  # the fleet's DNS cache holds its back-off: no verdict to keep
            return _Policy(None, f"robots.txt not fetched: {exc}")
        except FetchError as exc:
            if exc.transient:  # unreachable (RFC 9309 2.3.1.4): disallow all for a while
                return json.dumps(
                    {"unavailable": f"robots.txt unavailable: {exc}"}
                ).encode(), ROBOTS_ERROR_TTL
            # An answer that cannot be used (too many redirects, a corrupt encoding): allow all.
            return json.dumps({"allow": True}).encode(), ROBOTS_TTL
        if response.status_code >= 500:
            reason = f"robots.txt unavailable: HTTP {response.status_code}"
            return json.dumps({"unavailable": reason}).encode(), ROBOTS_ERROR_TTL
        if response.status_code >= 400:  # RFC 9309: 4xx means no rules at all
            return json.dumps({"allow": True}).encode(), ROBOTS_TTL
        text = response.body.decode("utf-8", "replace")
        return json.dumps({"body": text}).encode(), ROBOTS_TTL


def _parse(raw: bytes | str) -> _Policy:
    try:
        data = json.loads(raw)
    except ValueError:
        return _Policy(None, None)
    if "unavailable" in data:
        return _Policy(None, str(data["unavailable"]))
    if "body" in data:
        try:
            return _Policy(Protego.parse(str(data["body"])), None)
        except Exception:  # a robots.txt protego cannot read is as good as none
            return _Policy(None, None)
    return _Policy(None, None)


@dataclass(frozen=True, slots=True)
class RobotsState:
    """An origin's robots.txt as the fleet holds it: "ok" (rules read), "none" (none or unusable:
    everything allowed), or "unavailable" (5xx, unreachable: nothing is fetched until it is asked again)."""

    origin: str
    state: Literal["ok", "none", "unavailable"]
    detail: str | None


# Bytes of each cached robots.txt a listing reads: enough for its kind and an unavailable one's reason,
# never its body (up to 500 KiB each), however many origins the fleet holds.
HELD_HEAD = 1024
_UNAVAILABLE = '{"unavailable": '


async def held(redis: Redis, names: Names) -> list[RobotsState]:
    """Every origin's robots.txt the fleet holds now, read from its cache in Redis (the head of each
    entry only)."""
    prefix = names.robots_key("")
    keys = [k async for k in redis.scan_iter(match=names.robots_key("*"), count=1000)]
    async with redis.pipeline(transaction=False) as pipe:
        for key in keys:
            pipe.getrange(key, 0, HELD_HEAD - 1)
        values = await pipe.execute() if keys else []
    out = []
    for key, raw in zip(keys, values, strict=True):
        if not raw:  # expired between the scan and the read
            continue
        origin = (key.decode() if isinstance(key, bytes) else str(key))[len(prefix) :]
        head = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        if head.startswith(_UNAVAILABLE):
            try:
                detail = str(json.loads(head)["unavailable"])
            except (ValueError, KeyError, TypeError):  # cut at HELD_HEAD
                detail = head[len(_UNAVAILABLE) :].strip('"')[:300]
            out.append(RobotsState(origin, "unavailable", detail))
        else:  # not parsed with protego: a console polling a thousand origins needs only the kind
            out.append(RobotsState(origin, "ok" if head.startswith('{"body"') else "none", None))
    return sorted(out, key=lambda r: r.origin)
