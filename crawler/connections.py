"""Connections to RabbitMQ, Redis and the database, opened with one clear error when one is down."""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, overload
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractConnection, AbstractRobustChannel, AbstractRobustConnection
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AuthenticationError as RedisAuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from crawler import sentinel
from crawler.errors import ServiceUnavailable
from crawler.failover import FailoverConnection, nodes
from crawler.names import CONNECTION_CLOSE_WAIT
from crawler.redact import redact

log = logging.getLogger(__name__)

CONNECT_TIMEOUT = 10.0
# AMQP heartbeat timeout (s) asked for unless the URL says `?heartbeat=N`. RabbitMQ's 60 s would let a
# consumer cut off the network go on for 3 minutes (the client gives up after 3 missed timeouts)
# with work the broker has already handed to another; 20 s is the top of what RabbitMQ recommends.
AMQP_HEARTBEAT = 20
REDIS_CONNECTIONS = 64  # per process: Redis answers in microseconds, so more would only queue there
REDIS_WAIT = 60.0  # seconds a command may wait for a free connection before failing
# A command that loses its connection is sent again on a new one, backing off 50 ms, 100 ms ... 1 s:
# ten tries ride out a Redis restart of ~6 s, where failing would have a page fetched again.
REDIS_RETRIES = 10

# aiormq's handlers of RabbitMQ's connection.blocked / unblocked notices (private, name-mangled).
_NOTICES = ("_Connection__handle_connection_blocked", "_Connection__handle_connection_unblocked")

_warned: set[str] = set()
# getaddrinfo's "name not known" codes (EAI_NONAME, EAI_AGAIN, EAI_NODATA; socket.gaierror's errno).
_DNS_ERRORS = {socket.EAI_NONAME, socket.EAI_AGAIN, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}


def process_label(role: str) -> str:
    """Who this process is, for connection names: role, host and pid."""
    return f"{role} {socket.gethostname()} pid {os.getpid()}"


class Blocking:
    """Whether RabbitMQ blocks a connection's publishes (a resource alarm), and for how long in all.

    A blocked connection's publishes wait for the alarm to clear: the crawl holds, nothing is lost,
    nothing grows; this makes the wait visible in the log and the metrics instead of a silent stall.
    """

    def __init__(self, label: str) -> None:
        self.label = label
        self.reason: str | None = None
        self.blocks = 0  # how many times it was blocked
        self._since: float | None = None
        self._ended = 0.0  # seconds of the blocks that ended

    @property
    def blocked(self) -> bool:
        """True while RabbitMQ blocks the connection."""
        return self._since is not None

    def seconds(self) -> float:
        """Seconds blocked in all, the block under way included."""
        now = time.monotonic()
        return self._ended + (now - self._since if self._since is not None else 0.0)

    def block(self, reason: str) -> None:
        """RabbitMQ said connection.blocked."""
        if self._since is not None:
            return
        self._since = time.monotonic()
        self.reason = reason
        self.blocks += 1
        log.warning(
            "RabbitMQ blocks publishing on %s (%s): publishes, and the acks of the pages they come "
            "from, wait until its resource alarm clears (rabbitmq-diagnostics alarms); nothing is lost",
            self.label,
            reason,
        )

    def unblock(self) -> None:
        """RabbitMQ said connection.unblocked, or the connection was replaced by a fresh one."""
        if self._since is None:
            return
        took = time.monotonic() - self._since
        self._ended += took
        self._since = None
        log.warning("RabbitMQ unblocked publishing on %s after %.1fs", self.label, took)


def follow_blocking(connection: AbstractRobustConnection, blocking: Blocking) -> None:
    """Have `blocking` follow RabbitMQ's blocked / unblocked notices on `connection`, across reconnects."""

    def hook(*_: object) -> None:
        blocking.unblock()  # a fresh connection starts unblocked
        transport = connection.transport
        if transport is None or not _hook(transport.connection, blocking):
            problem = "aiormq's connection has no blocked/unblocked handlers of the expected shape"
            if problem not in _warned:
                _warned.add(problem)
                log.warning("cannot report RabbitMQ resource alarms in the log: %s", problem)

    hook()
    connection.reconnect_callbacks.add(hook)


def _hook(amqp: Any, blocking: Blocking) -> bool:
    # aiormq reads both notices (and logs them, at a level the crawler silences) but offers no
    # callback: wrap its handlers on this instance. Where they are missing, publishing still waits
    # as it should; only the log line and the metric are lost.
    originals = [getattr(amqp, name, None) for name in _NOTICES]
    if not hasattr(amqp, "__dict__") or not all(inspect.iscoroutinefunction(h) for h in originals):
        return False
    on_blocked, on_unblocked = originals

    async def blocked(frame: Any) -> None:
        blocking.block(str(getattr(frame, "reason", None) or "no reason given"))
        await on_blocked(frame)  # type: ignore[misc]

    async def unblocked(frame: Any) -> None:
        blocking.unblock()
        await on_unblocked(frame)  # type: ignore[misc]

    setattr(amqp, _NOTICES[0], blocked)
    setattr(amqp, _NOTICES[1], unblocked)
    return True


@asynccontextmanager
async def broker(
    url: str, role: str, blocking: Blocking | None = None
) -> AsyncIterator[AbstractRobustConnection]:
    """A robust RabbitMQ connection named after this process; it reconnects by itself, and logs
    when RabbitMQ blocks its publishes (into `blocking`, if given)."""
    connection = await _first_reachable(nodes(url), role)
    _log_outages(connection, role)
    follow_blocking(connection, blocking or Blocking(process_label(role)))
    try:
        yield connection
    finally:
        await _closed(connection, role)


async def _closed(connection: AbstractRobustConnection, role: str) -> None:
    """Close `connection`, waiting at most CLOSE_WAIT: a stopping program must not hang on a broker
    that does not answer (blocked, or mid-reconnect); its socket closes with the process, and RabbitMQ
    then returns every unacked delivery to its queue."""
    try:
        await asyncio.wait_for(connection.close(), CONNECTION_CLOSE_WAIT)
    except TimeoutError:
        log.warning(
            "%s: RabbitMQ did not confirm the connection's close within %.0fs; leaving it to the socket",
            role,
            CONNECTION_CLOSE_WAIT,
        )


@overload
async def publishing_channel(connection: AbstractRobustConnection) -> AbstractRobustChannel: ...
@overload
async def publishing_channel(connection: AbstractConnection) -> AbstractChannel: ...
async def publishing_channel(connection: AbstractConnection) -> AbstractChannel:
    """A channel to publish on: each publish confirmed by the broker, and one it returns (mandatory, no
    queue bound) raised as an error instead of counting as sent."""
    return await connection.channel(publisher_confirms=True, on_return_raises=True)


async def _first_reachable(urls: Sequence[str], role: str) -> FailoverConnection:
    """A connection to the first node of `urls` that answers, starting at a random one so that a
    fleet spreads over a cluster; ServiceUnavailable, saying why for each, if none does."""
    start = random.randrange(len(urls)) if urls else 0
    refusals = []
    for i in range(len(urls)):
        at = (start + i) % len(urls)
        connection = FailoverConnection(
            [with_heartbeat(u) for u in urls],
            at,
            client_properties={"connection_name": process_label(role)},
        )
        try:
            await connection.connect(timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, aio_pika.exceptions.AMQPError) as exc:
            await connection.close()
            refusals.append(f"at {redact(urls[at])}: {_amqp_refusal(exc, urls[at])}")
            continue
        if refusals:
            log.warning("RabbitMQ (%s): connected to %s; not %s", role, redact(urls[at]), "; ".join(refusals))
        return connection
    raise ServiceUnavailable(f"cannot connect to RabbitMQ {'; '.join(refusals) or 'at no URL'}")


def _amqp_refusal(exc: BaseException, url: str) -> str:
    """Why a first connection to RabbitMQ failed, in words, and what to change."""
    parts = urlsplit(url)
    user = unquote(parts.username or "guest")
    if isinstance(exc, aio_pika.exceptions.ProbableAuthenticationError):
        return f"it refused the login of user {user!r}: check the user and password in CRAWLER_AMQP_URL"
    if isinstance(exc, aio_pika.exceptions.InvalidFrameError) and "Connection.Close" in str(exc):
        # RabbitMQ closes the connection at Connection.Open when the vhost is not one the user may use.
        vhost = unquote(parts.path[1:]) or "/"
        return (
            f"vhost {vhost!r} does not exist or user {user!r} may not use it: create it "
            f"(rabbitmqctl add_vhost, set_permissions) or fix the vhost in CRAWLER_AMQP_URL"
        )
    return f"{_network_cause(exc)}; is it running? Set CRAWLER_AMQP_URL to its address"


def _network_cause(exc: BaseException) -> str:
    """A failed connect in words: refused, host unknown, no answer, or what the library said."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {CONNECT_TIMEOUT:g}s"
    code = getattr(exc, "errno", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    text = str(exc).lower()
    if isinstance(exc, socket.gaierror) or code in _DNS_ERRORS or "name or service not known" in text:
        return "its host name is not known (DNS)"
    if code == errno.ECONNREFUSED or "connection refused" in text:
        return "connection refused"
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route to its host"
    return f"{type(exc).__name__}: {redact(str(exc))}"


def with_heartbeat(url: str) -> str:
    """`url` asking for the crawler's AMQP heartbeat, unless it names one itself."""
    parts = urlsplit(url)
    if "heartbeat" in parse_qs(parts.query):
        return url
    query = "&".join(q for q in (parts.query, f"heartbeat={AMQP_HEARTBEAT}") if q)
    return urlunsplit(parts._replace(query=query))


def _log_outages(connection: AbstractRobustConnection, role: str) -> None:
    """One line when the broker connection drops and one when it is back, with how long it was away."""
    lost_at: list[float] = []  # set while the connection is away; its attempts to come back fail quietly

    def lost(_: AbstractConnection | None, exc: BaseException | None) -> None:
        if connection.close_called or lost_at:
            return  # closed by this process; or a failed reconnect, which aio-pika logs itself
        lost_at.append(time.monotonic())
        log.warning(
            "RabbitMQ connection (%s) lost: %s; reconnecting. Its unacked deliveries are back in "
            "their queues: work under way on them is dropped, neither stored nor acked",
            role,
            _why(exc),
        )

    def back(_: AbstractRobustConnection | None) -> None:
        away = f" after {time.monotonic() - lost_at.pop():.1f}s" if lost_at else ""
        log.warning("RabbitMQ connection (%s) back%s; channels and consumers restored", role, away)

    connection.close_callbacks.add(lost)
    connection.reconnect_callbacks.add(back)


def _why(exc: BaseException | None) -> str:
    """What ended a broker connection, for a log line."""
    if exc is None:
        return "closed"
    if isinstance(exc, asyncio.CancelledError):  # aiormq's heartbeat check gave up on the socket
        return "nothing heard from the broker for 3 heartbeat timeouts (the network may be cut)"
    return redact(str(exc) or type(exc).__name__)


@asynccontextmanager
async def redis(url: str) -> AsyncIterator[Redis]:
    """A Redis client that has answered a PING."""
    # redis-py's default pool fails a command outright once 100 are under way (MaxConnectionsError),
    # and a consumer of hundreds of domains has more messages than that in flight: wait for a
    # connection instead.
    options: dict[str, Any] = {
        "max_connections": REDIS_CONNECTIONS,
        "timeout": REDIS_WAIT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "retry": Retry(ExponentialBackoff(cap=1.0, base=0.05), REDIS_RETRIES),
        # Through Sentinel, a master demoted by a failover answers writes with READONLY, which
        # redis-py turns into a ConnectionError: retried, on the promoted replica.
        "retry_on_error": [RedisConnectionError],
    }
    pool = (
        sentinel.master_pool(_sentinel_url(url), **options)
        if sentinel.is_sentinel(url)
        else BlockingConnectionPool.from_url(url, **options)
    )
    client = Redis.from_pool(pool)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(client.aclose)
        await _reachable(url)
        yield client


def _sentinel_url(url: str) -> sentinel.SentinelURL:
    try:
        return sentinel.parse(url)
    except ValueError as exc:
        raise ServiceUnavailable(f"CRAWLER_REDIS_URL {redact(url)}: {exc}") from None


async def _reachable(url: str) -> None:
    """Raise ServiceUnavailable, saying why, unless Redis at `url` answers a PING at once.

    Asked once, without the retries that carry a running crawl through a restart of Redis: a
    program started against a Redis that is not there says so in a moment.
    """
    once: dict[str, Any] = {"socket_connect_timeout": CONNECT_TIMEOUT, "retry": Retry(NoBackoff(), 0)}
    probe = (
        Redis.from_pool(sentinel.master_pool(_sentinel_url(url), **once))
        if sentinel.is_sentinel(url)
        else Redis.from_url(url, **once)
    )
    try:
        await asyncio.wait_for(probe.ping(), CONNECT_TIMEOUT)
    except MasterNotFoundError as exc:
        raise ServiceUnavailable(
            f"cannot connect to Redis through the sentinels of {redact(url)}: none of them names a "
            f"master of that service, or none answers ({exc}); check CRAWLER_REDIS_URL"
        ) from None
    except RedisAuthenticationError:
        raise ServiceUnavailable(
            f"cannot connect to Redis at {redact(url)}: it refused the password (or user); "
            "check CRAWLER_REDIS_URL"
        ) from None
    except (RedisError, OSError, TimeoutError) as exc:
        cause = exc.__cause__ if isinstance(exc, RedisConnectionError) and exc.__cause__ else exc
        raise ServiceUnavailable(
            f"cannot connect to Redis at {redact(url)}: {_network_cause(cause)}; "
            "is it running? Set CRAWLER_REDIS_URL to its address"
        ) from None
    finally:
        await probe.aclose()
