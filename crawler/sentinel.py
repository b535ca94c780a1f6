"""Redis through Sentinel: a `redis+sentinel://` URL, and a connection pool that follows the master."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from redis.asyncio import BlockingConnectionPool
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

SCHEME = "redis+sentinel"
SENTINEL_PORT = 26379
SHAPE = f"{SCHEME}://[:PASSWORD@]HOST:26379,HOST:26379/SERVICE/DB"


@dataclass(frozen=True, slots=True)
class SentinelURL:
    """Where the sentinels are, which master they watch, and how to log in to it."""

    sentinels: tuple[tuple[str, int], ...]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def is_sentinel(url: str) -> bool:
    """Whether `url` names Redis through Sentinel."""
    return url.strip().lower().startswith(f"{SCHEME}://")


def parse(url: str) -> SentinelURL:
    """`url` read; ValueError saying what is wrong with it."""
    rest = url.strip()[len(SCHEME) + 3 :]
    netloc, _, path = rest.partition("/")
    credentials, at, hosts = netloc.rpartition("@")
    if not at:
        credentials, hosts = "", netloc
    sentinels = []
    for item in hosts.split(","):
        item = item.strip()
        if item.startswith("["):  # [IPv6] or [IPv6]:PORT
            host, _, after = item[1:].partition("]")
            port = after.removeprefix(":") or str(SENTINEL_PORT)
        else:
            host, colon, port = item.rpartition(":")
            if not colon:
                host, port = item, str(SENTINEL_PORT)
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{item!r} is not a sentinel's HOST:PORT: write {SHAPE}")
        sentinels.append((host, int(port)))
    service, _, db = path.partition("/")
    db = db.strip("/") or "0"
    if not service or not db.isdigit():
        raise ValueError(f"name the master's service and a database number: write {SHAPE}")
    user, _, password = credentials.partition(":")
    return SentinelURL(
        tuple(sentinels),
        unquote(service),
        int(db),
        unquote(user) or None,
        unquote(password) if password else None,
    )


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Connections to whichever server the sentinels name master, waiting for a free one when all are
    in use (as the crawler's pool for a plain Redis does) rather than failing."""

    async def aclose(self) -> None:
        """Close its connections, and those it kept to the sentinels."""
        await super().aclose()
        await self.sentinel_manager.aclose()


def master_pool(url: SentinelURL, **kwargs: Any) -> BlockingSentinelPool:
    """A pool of connections to the master of `url`'s service; `kwargs` go to the pool."""
    timeout = kwargs.get("socket_connect_timeout")
    sentinel = Sentinel(
        list(url.sentinels),
        sentinel_kwargs={"socket_connect_timeout": timeout, "socket_timeout": timeout},
    )
    return BlockingSentinelPool(  # type: ignore[no-untyped-call]
        url.service,
        sentinel,
        db=url.db,
        username=url.username,
        password=url.password,
        is_master=True,
        **kwargs,
    )
