"""Each host's line of pages parked for want of its token, one for the fleet: the turn a page comes
back at, kept in Redis so that workers parking the same host's pages give turns at its rate together."""

from __future__ import annotations

from redis.asyncio import Redis

from crawler.names import Names

# KEYS[1] the host's line; ARGV: the earliest turn, the seconds between turns, how long the line's
# end outlives its last turn (ms), the caller's clock. Returns the page's turn. The caller's clock,
# not the server's: a turn is read against the clocks of the workers the page comes back to.
_NEXT = """
local turn = math.max(tonumber(redis.call('GET', KEYS[1])) or 0, tonumber(ARGV[1]))
local after = turn + tonumber(ARGV[2])
local ms = math.ceil((after - tonumber(ARGV[4])) * 1000) + tonumber(ARGV[3])
redis.call('SET', KEYS[1], string.format('%.3f', after), 'PX', ms)
return string.format('%.3f', turn)
"""
# A line past its end says nothing more (its next page starts one): a host's key goes a second later.
KEPT_MS = 1_000


class HostLines:
    """The fleet's lines of hosts' parked pages."""

    def __init__(self, redis: Redis, names: Names) -> None:
        self._next = redis.register_script(_NEXT)
        self._names = names

    async def next_turn(self, host: str, earliest: float, every: float, now: float) -> float:
        """The next turn in `host`'s line (Unix seconds, no sooner than `earliest`), the one after
        it `every` seconds later; `now` is the caller's clock."""
        turn = await self._next(keys=[self._names.line_key(host)], args=[earliest, every, KEPT_MS, now])
        return float(turn)
