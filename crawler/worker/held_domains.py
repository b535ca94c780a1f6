"""The domains a consumer leaves alone: those paused fleet-wide (followed from Redis), and those the
fetch service refuses (a rejected key: until the worker restarts; a spent budget: `budget_pause`;
an outage of the service: until it answers, or in burst mode for `give_up` seconds at most)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from crawler.errors import BackendBudgetExhausted, BackendDown, BackendHalt
from crawler.frontier.crawls import CrawlState
from crawler.frontier.delivery import Delivery
from crawler.frontier.hosts import HostShards
from crawler.frontier.subscriptions import Subscriptions
from crawler.names import DISCOVERED_LABEL, PAUSE_POLL
from crawler.stopping import still_cancelled

log = logging.getLogger("crawler.worker.consumer")


class Holds:
    """Holds a consumer's paused and halted domains' subscriptions, and releases them after."""

    def __init__(
        self,
        subscriptions: Subscriptions,
        crawls: CrawlState | None,
        budget_pause: Callable[[], float],
        stopping: Callable[[], bool],
        give_up: float | None = None,
        shards: HostShards | None = None,
    ) -> None:
        self._subscriptions = subscriptions
        self._shards = shards  # discovered hosts' shards: held together, as DISCOVERED_LABEL
        self._crawls = crawls  # None: no fleet-wide pauses (tests)
        self._budget_pause = budget_pause
        self._stopping = stopping
        self._give_up = give_up  # seconds of a fetch service's outage after which a domain stays halted
        self.halted: dict[str, str] = {}  # domain -> why the fetch service stopped it
        # Halted domains that come back by themselves (a spent budget): burst mode waits for them.
        self.resting: set[str] = set()
        self.paused: set[str] = set()  # domains paused fleet-wide, as last read
        self._resuming: set[asyncio.Task[None]] = set()

    async def read_pauses(self) -> None:
        """Read the domains paused fleet-wide (before subscribing: a paused one is not subscribed)."""
        self.paused = await self._crawls.paused() if self._crawls else set()

    def active(self, domains: Sequence[str]) -> list[str]:
        """Of `domains`, those neither paused fleet-wide nor halted by the fetch service."""
        return [d for d in domains if d not in self.paused and d not in self.halted]

    async def halt(self, domain: str, message: Delivery, exc: BackendHalt) -> None:
        """The fetch service refuses the domain: its message goes back, its queue is held.

        Nothing is set aside: the pages are fine, the key, the budget or the service is not. A
        paused domain (budget, outage) is taken up again after its pause; a rejected key waits for a
        restart. Discovered hosts (`domain` DISCOVERED_LABEL) are held and taken up together.
        """
        try:
            await message.nack(requeue=True)
        except Exception as nack_failed:  # the channel is gone: the broker returns it all the same
            log.debug("%s: nack failed (%r)", domain, nack_failed)
        if domain in self.halted:
            return
        wait = self._budget_pause() if isinstance(exc, BackendBudgetExhausted) else exc.pause
        outage = isinstance(exc, BackendDown)
        why = str(exc)
        if isinstance(exc, BackendDown) and self._give_up is not None and exc.lasted >= self._give_up:
            wait, why = None, f"{why} (down for {exc.lasted:.0f}s)"
        self.halted[domain] = why
        pause = f"paused for {wait:.3g}s" if wait else "stopped until this worker is restarted"
        # An outage is the service's, not the domain's: each domain says so, but not as an error.
        log.log(
            logging.WARNING if outage and wait else logging.ERROR,
            "%s: %s; its messages stay in the queue, %s",
            domain,
            why,
            pause,
        )
        if domain == DISCOVERED_LABEL and self._shards is not None:
            await self._shards.cancel()
        else:
            await self._subscriptions.hold(domain)
        if wait:
            self.resting.add(domain)
            asyncio.get_running_loop().call_later(wait, self._resume, domain)

    def _resume(self, domain: str) -> None:
        """Take a halted domain's queue up again (its budget may have been raised), unless paused."""
        self.resting.discard(domain)
        if self.halted.pop(domain, None) is None or self._stopping() or domain in self.paused:
            return  # a fleet-wide pause releases it when it ends
        log.info("%s: taking its messages again after a pause", domain)
        shards = self._shards if domain == DISCOVERED_LABEL else None
        task = asyncio.ensure_future(shards.release() if shards else self._subscriptions.release(domain))
        self._resuming.add(task)
        task.add_done_callback(lambda done: self._resumed(domain, done))

    def _resumed(self, domain: str, task: asyncio.Future[None]) -> None:
        self._resuming.discard(task)
        # Its channel closed meanwhile (the worker stopping, the broker gone): nothing is delivered on
        # it, and a restarted worker subscribes afresh.
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("%s: its queue could not be taken up again (%r)", domain, exc)

    async def follow_pauses(self, domains: Callable[[], Sequence[str]]) -> None:
        """Follow the fleet-wide paused domains: hold a paused queue's subscription, release it after."""
        assert self._crawls is not None
        while True:
            await asyncio.sleep(PAUSE_POLL)
            try:
                paused = await self._crawls.paused()
            except Exception as exc:  # Redis away: keep what is in force, look again
                still_cancelled()
                log.debug("cannot read paused domains (%r)", exc)
                continue
            if self._stopping():
                return
            for domain in domains():
                if domain in paused and domain not in self.paused:
                    self.paused.add(domain)
                    await self._subscriptions.hold(domain)
                    log.info("%s paused: its queue is left alone until resumed", domain)
                elif domain not in paused and domain in self.paused:
                    self.paused.discard(domain)
                    if domain not in self.halted:
                        await self._subscriptions.release(domain)
                    log.info("%s resumed", domain)
