"""The host layout's pages whose host has no token for them yet: two seconds of its rate at most wait
in this worker, the others in the host wait queues, each given a turn in its host's line (one for the
fleet, crawler/frontier/lines.py) and sent round only as often as the wait queues' lengths need to
bring it back near that turn."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from crawler.frontier.hosts import shard_of
from crawler.frontier.lines import HostLines
from crawler.names import HOST_WAITS

K = TypeVar("K")

# A page whose token is due within this long waits for it here, with at most twice a host's rate
# times as long of its pages (and MOST_HERE, and half its shard's prefetch over all hosts); one due
# later, or past those, waits in a host wait queue. Without pages waiting here, a host's pages each
# came back from that queue only to find the token taken: about a page a second, whatever its rate.
INLINE_WAIT = HOST_WAITS[0]
MOST_HERE = 8


class HostTurns:
    """Pages waiting here per host and per shard, and the turns of those parked."""

    def __init__(
        self, lines: HostLines, shards: int, prefetch: int, clock: Callable[[], float] = time.time
    ) -> None:
        self._lines = lines
        self._shards = shards
        # Of each shard's deliveries at once, those waiting here: half, so the shard's other hosts
        # always have the rest (none with a prefetch of 1).
        self._room = prefetch // 2
        self._clock = clock  # wall time: a turn is told to whichever worker the page comes back to
        self._waiting: dict[str, int] = {}
        self._in_shard: dict[int, int] = {}

    @contextmanager
    def turn(self, host: str, wait: float, rate: float, told: float | None) -> Iterator[bool]:
        """Within: whether a page of `host` (at `rate` pages/s) whose token is due in `wait` seconds
        waits for it here; not while its turn, `told` when it was parked, is a wait queue away."""
        room = min(MOST_HERE, max(1, math.ceil(rate * INLINE_WAIT * 2)))
        here = self._waiting.get(host, 0)
        shard = shard_of(host, self._shards)
        full = self._in_shard.get(shard, 0) >= self._room
        early = told is not None and told - self._clock() >= HOST_WAITS[0]
        if wait > INLINE_WAIT or here >= room or full or early:
            yield False
            return
        self._waiting[host] = here + 1
        self._in_shard[shard] = self._in_shard.get(shard, 0) + 1
        try:
            yield True
        finally:
            _less(self._waiting, host)
            _less(self._in_shard, shard)

    async def parked(self, host: str, wait: float, rate: float, told: float | None) -> tuple[float, float]:
        """The host wait queue (seconds) for a page of `host` whose token is due in `wait` seconds, and
        its turn: the one it was `told` (a wait queue away at least), else the next at the end of the
        host's line at `rate`."""
        now = self._clock()
        if told is None:
            # One line for the fleet: lines of their own let N workers give turns at N times the
            # rate, and the pages past the turns their host could keep went round every second.
            turn = await self._lines.next_turn(host, now + wait, 1 / rate, now)
        else:
            # Its turn come while the host's pages here hold its tokens: next in line still.
            turn = max(told, now + HOST_WAITS[0])
        return wait_queue(turn - now), turn


def wait_queue(ahead: float) -> float:
    """The host wait queue for a page whose turn is `ahead` seconds away: the longest no longer (the
    shortest at least), so the page comes back near its turn, a few times at most on the way."""
    return max((w for w in HOST_WAITS if w <= ahead), default=HOST_WAITS[0])


def _less(counts: dict[K, int], key: K) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
