"""Dead letters: listed, paged and grouped (the queue left as it was), replayed or purged."""

from __future__ import annotations

from dataclasses import dataclass

from crawler.frontier import dead
from crawler.frontier.client import Frontier
from crawler.settings import Settings


@dataclass(frozen=True, slots=True)
class DeadGroup:
    """Dead letters of one domain for one reason: how many, and the newest one's error and time."""

    domain: str
    reason: str
    count: int
    last_error: str
    last_time: str


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """The frontier's dead queue; `domain` and `reason` choose the letters a verb takes."""

    settings: Settings
    frontier: Frontier

    async def letters(
        self, domain: str | None = None, reason: str | None = None, limit: int | None = None
    ) -> list[dead.DeadLetter]:
        """The dead letters that match, oldest first; the queue is left as it was."""
        return await dead.list_dead(
            self.frontier.connection, self.settings.names, dead.matcher(domain, reason), limit
        )

    async def page(self, domain: str | None, reason: str | None, limit: int, after: int = 0) -> dead.DeadPage:
        """A page of the dead letters that match, from position `after`; the queue is left as it was."""
        return await dead.page_dead(
            self.frontier.connection, self.settings.names, dead.matcher(domain, reason), limit, after
        )

    async def groups(self) -> list[DeadGroup]:
        """Every dead letter counted by domain and reason, most first; the queue is left as it was."""
        letters = await self.letters()
        groups: dict[tuple[str, str], list[dead.DeadLetter]] = {}
        for letter in letters:
            groups.setdefault((letter.domain, letter.reason), []).append(letter)
        out = [
            DeadGroup(domain, reason, len(found), found[-1].error, found[-1].time)
            for (domain, reason), found in groups.items()
        ]
        return sorted(out, key=lambda g: (-g.count, g.domain, g.reason))

    async def replay(self, domain: str | None = None, reason: str | None = None) -> int:
        """Put matching dead letters back into their queues, attempts reset; how many."""
        return await dead.replay(self.frontier.connection, self.settings.names, dead.matcher(domain, reason))

    async def purge(self, domain: str | None = None, reason: str | None = None) -> int:
        """Delete matching dead letters for good; how many."""
        return await dead.purge(self.frontier.connection, self.settings.names, dead.matcher(domain, reason))
