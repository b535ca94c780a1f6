"""One delivery: a version's JSON POSTed to a receiver, signed, through the private-network guard,
within the receiver's timeout; what came of it (delivered, worth trying again, or not)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import httpcore
from yarl import URL

from crawler.config import CrawlConfig, Webhook
from crawler.errors import Refused
from crawler.fetch.connect import AddressPolicy, GuardedBackend, GuardedResolver
from crawler.frontier.retry import TRANSIENT_STATUSES, parse_retry_after
from crawler.webhooks.signing import SIGNATURE_HEADER, signature

ANSWER_READ = 65_536  # bytes of a receiver's answer read (and dropped): enough to reuse the connection


@dataclass(frozen=True, slots=True)
class Posted:
    """What one POST came to: delivered (2xx), or why not and whether a later try may succeed."""

    delivered: bool
    transient: bool = False
    error: str = ""
    status: int | None = None
    retry_after: float | None = None


class Poster:
    """POSTs deliveries over one pooled aiohttp session; its resolver and the address check of a
    literal IP keep webhooks off private networks unless domains.yaml allows them, as fetches are."""

    def __init__(self, config: CrawlConfig, max_connections: int = 64) -> None:
        self._guard = GuardedBackend(
            config.resolve, AddressPolicy(config.allow_private_networks, config.allow_networks)
        )
        connector = aiohttp.TCPConnector(
            limit=max_connections, resolver=GuardedResolver(self._guard), use_dns_cache=False
        )
        self._session = aiohttp.ClientSession(
            connector=connector, trust_env=False, headers={"User-Agent": config.user_agent}
        )

    async def post(self, hook: Webhook, body: bytes, message_id: str, kind: str, attempt: int) -> Posted:
        """POST `body` (a version, `kind`, known by `message_id`) to `hook`, try number `attempt`."""
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: signature(hook.secret, timestamp, body),
            "Idempotency-Key": message_id,
            "Crawler-Event": kind,
            "Crawler-Attempt": str(attempt),
        }
        parts = urlsplit(hook.url)
        try:
            async with asyncio.timeout(hook.timeout):
                # aiohttp resolves no literal address: checked here; a name, by the resolver.
                await self._guard.allowed(parts.hostname or "", parts.port or 0)
                async with self._session.post(
                    URL(hook.url, encoded=True), data=body, headers=headers, allow_redirects=False
                ) as answer:
                    await answer.content.read(ANSWER_READ)
                    status = answer.status
                    retry_after = answer.headers.get("Retry-After")
        except Refused as exc:
            return Posted(False, error=str(exc))
        except TimeoutError:
            return Posted(False, transient=True, error=f"no answer within {hook.timeout:g}s")
        except (aiohttp.ClientError, httpcore.ConnectError, OSError) as exc:
            return Posted(False, transient=True, error=f"{type(exc).__name__}: {exc}"[:300])
        if 200 <= status < 300:
            return Posted(True, status=status)
        transient = status in TRANSIENT_STATUSES or status >= 500
        return Posted(False, transient, f"HTTP {status}", status, parse_retry_after(retry_after))

    async def aclose(self) -> None:
        """Close the session and its connections."""
        await self._session.close()
