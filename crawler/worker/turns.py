"""The host layout's pages whose host has no token for them yet: two seconds of its rate at most wait
in this worker, the others in the host wait queues, each given a turn in its host's line and sent
round only as often as the wait queues' lengths need to bring it back near that turn."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from crawler.frontier.hosts import shard_of
from crawler.names import HOST_WAITS

K = TypeVar("K")

# A page whose token is due within this long waits for it here, with at most twice a host's rate
# times as long of its pages (and MOST_HERE, and half its shard's prefetch over all hosts); one due
# later, or past those, waits in a host wait queue. Without pages waiting here, a host's pages each
# came back from that queue only to find the token taken: about a page a second, whatever its rate.
INLINE_WAIT = HOST_WAITS[0]
MOST_HERE = 8
SWEEP_EVERY = 30.0  # seconds between sweeps of the lines of hosts whose last turn has passed


class HostTurns:
    """Pages waiting here per host and per shard, and the end of each host's line of pages parked by
    this worker."""

    def __init__(self, shards: int, prefetch: int, clock: Callable[[], float] = time.time) -> None:
        self._shards = shards
        # Of each shard's deliveries at once, those waiting here: half, so the shard's other hosts
        # always have the rest (none with a prefetch of 1).
        self._room = prefetch // 2
        self._clock = clock  # wall time: a turn is told to whichever worker the page comes back to
        self._waiting: dict[str, int] = {}
        self._in_shard: dict[int, int] = {}
        self._line_end: dict[str, float] = {}  # host -> when the turn after its last one given comes
        self._swept = clock()

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

    def parked(self, host: str, wait: float, rate: float, told: float | None) -> tuple[float, float]:
        """The host wait queue (seconds) for a page of `host` whose token is due in `wait` seconds, and
        its turn: the one it was `told` (a wait queue away at least), else the next at the end of the
        host's line at `rate`. The queue is the longest no longer than the time to its turn (at least the
        shortest), so it comes back near it, a few times at most on the way."""
        now = self._clock()
        if told is None:
            turn = max(self._line_end.get(host, 0.0), now + wait)
            self._line_end[host] = turn + 1 / rate
        else:
            # Its turn come while the host's pages here hold its tokens: next in line still.
            turn = max(told, now + HOST_WAITS[0])
        seconds = max((w for w in HOST_WAITS if w <= turn - now), default=HOST_WAITS[0])
        if now - self._swept >= SWEEP_EVERY:
            self._swept = now
            self._line_end = {h: t for h, t in self._line_end.items() if t > now}
        return seconds, turn


def _less(counts: dict[K, int], key: K) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
