"""A large host of the host layout: a few of its pages wait in the worker for its tokens, the others in
the host wait queues, each in line for its turn (crawler/worker/turns.py)."""

from __future__ import annotations

import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis.asyncio import Redis

from crawler.config import load_config
from crawler.fetch.ratelimit import RateLimiter, budget
from crawler.frontier.lines import HostLines
from crawler.frontier.parking import Parking
from crawler.names import HOST_WAITS, Names
from crawler.worker import wiring
from crawler.worker.turns import MOST_HERE, HostTurns, wait_queue
from demo.site import Reply, serve
from tests.hosts.test_layout import sites, stored
from tests.support.services import settings_for


@pytest.mark.timeout(30)
async def test_a_hosts_pages_wait_here_up_to_its_rate_and_the_others_in_line_for_their_turns(
    redis: Redis, prefix: str
) -> None:
    now = [1000.0]
    lines = HostLines(redis, Names(prefix))
    turns = HostTurns(lines, 1, 16, clock=lambda: now[0])
    with ExitStack() as stack:
        held = [stack.enter_context(turns.turn("b.test", 0.1, 2.0, None)) for _ in range(4)]
        assert held == [True] * 4  # two seconds of its rate, 2 pages/s
        assert not stack.enter_context(turns.turn("b.test", 0.1, 2.0, None))
        assert stack.enter_context(turns.turn("c.test", 0.1, 2.0, None))  # another host's own
    with turns.turn("b.test", 1.5, 2.0, None) as late:
        assert not late  # its token is further off than the shortest wait queue
    with turns.turn("b.test", 0.0, 100.0, None) as fast:
        assert fast  # (MOST_HERE at most, whatever the rate)
    assert MOST_HERE < 100 * 2
    # 60 pages parked at once at 2 pages/s: turns half a second apart, each in the longest wait
    # queue that brings it back no later than its turn.
    parked = [await turns.parked("b.test", 0.3, 2.0, None) for _ in range(60)]
    assert [t for _, t in parked] == [1000.3 + i / 2 for i in range(60)]
    assert [s for s, _ in parked[:3]] == [HOST_WAITS[0]] * 3  # due within a second: the shortest
    assert all(s <= t - now[0] or s == HOST_WAITS[0] for s, t in parked)
    assert Counter(s for s, _ in parked) == {1.0: 4, 2.0: 6, 5.0: 10, 10.0: 40}
    # One back early keeps its turn, and does not wait here while it is a wait queue away.
    now[0] += 10
    with turns.turn("b.test", 0.1, 2.0, parked[59][1]) as early:
        assert not early
    assert await turns.parked("b.test", 0.1, 2.0, parked[59][1]) == (10.0, parked[59][1])
    # One whose turn came while the host's pages here held its tokens stays at the front.
    assert await turns.parked("b.test", 0.1, 2.0, parked[0][1]) == (1.0, now[0] + 1)
    # A new page joins the end of the line, which is the fleet's: another worker's page comes next.
    assert (await turns.parked("b.test", 0.1, 2.0, None))[1] == parked[59][1] + 0.5
    other = HostTurns(lines, 1, 16, clock=lambda: now[0])
    assert (await other.parked("b.test", 0.1, 2.0, None))[1] == parked[59][1] + 1.0
    assert (await other.parked("c.test", 0.1, 2.0, None))[1] == now[0] + 0.1  # a line per host


def test_a_line_hours_long_sends_its_last_pages_round_a_few_times() -> None:
    # 20,000 pages of a host at a page a second: a line of 5.6 hours.
    rounds = []
    for turn in (1.5 + i for i in range(20_000)):
        now, trips = wait_queue(turn), 1
        while turn - now >= HOST_WAITS[0]:  # back early: round again, keeping its turn
            now += wait_queue(turn - now)
            trips += 1
        assert turn - HOST_WAITS[0] < now <= turn  # back near its turn, never past it
        rounds.append(trips)
    # 25 rounds at most, 12.7 on average; with wait queues of 30 s at most, 670 and 336.
    assert max(rounds) <= 25 and sum(rounds) / len(rounds) < 13, (max(rounds), sum(rounds) / len(rounds))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("slowed", ["", "crawl-delay", "back-off"])
async def test_a_large_host_keeps_its_rate_and_its_pages_go_round_the_wait_queues_a_few_times(
    tmp_path: Path,
    amqp_url: str,
    prefix: str,
    sqlite_url: str,
    redis: Redis,
    monkeypatch: pytest.MonkeyPatch,
    slowed: str,
) -> None:
    # Slowed by its robots.txt's Crawl-delay (to 4 pages/s) or a back-off (to 2.5), the host's line
    # goes at that rate, not the domains file's 10: at 10, most of its pages came back past their
    # turn, every second.
    pages = {"": 60, "crawl-delay": 40, "back-off": 30}[slowed]
    served = sites(
        {
            "a.test": ("127.0.0.21", {"/": ["b.test/"]}),
            "b.test": (
                "127.0.0.61",
                {"/": [f"b.test/{i}" for i in range(pages)], **{f"/{i}": [] for i in range(pages)}},
            ),
        }
    )
    if slowed == "crawl-delay":
        robots = b"User-agent: *\nCrawl-delay: 0.25\n"
        served["b.test"].routes["/robots.txt"] = Reply(200, robots, {"Content-Type": "text/plain"})
    (tmp_path / "shops.txt").write_text("b.test\nc.test\n")  # past the line: the host layout's
    config_path = tmp_path / "d.yaml"
    config_path.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.2], "sitemaps": False},
                "resolve": {s.host: s.ip for s in served.values()},
                "allow_private_networks": True,
                "frontier": {"max_domain_queues": 2},
                "domains": {"a.test": {}},
                "domains_file": {
                    "path": "shops.txt",
                    "template": {"rate": 10, "burst": 1, "backoff_recovery": 60},
                },
            }
        )
    )
    settings = settings_for(amqp_url, prefix, sqlite_url, config_path)
    config = load_config(config_path)
    waits: Counter[float] = Counter()
    wait = Parking.wait

    async def counted(self: Parking, message: Any, seconds: float, turn: float) -> None:
        waits[seconds] += 1
        await wait(self, message, seconds, turn)

    monkeypatch.setattr(Parking, "wait", counted)
    if slowed == "back-off":
        # 429s cut its rate to a quarter (as the fleet kept it outside Redis), for a minute at least.
        kept = RateLimiter(redis, Names(prefix), kept=lambda domain: (0.25, time.time(), 0.0))
        await kept.slow_down("b.test", budget(config.rules_for("b.test"), None))
    with serve(*served.values()):
        await wiring.consume(settings, config, burst=True, seeds=[served["a.test"].url()])
    assert sum(1 for d in stored(sqlite_url).values() if d == "b.test") == pages + 1
    # Each page came back to find the token taken, every second, before: 1,575 waits in 57 s (a
    # page a second); 128-130 in 9-10 s here, on an idle machine and beside three busy loops. With
    # the Crawl-delay: 76; 130 with the line at the domains file's rate. With the back-off (30 pages at
    # 2.5/s): 68; 105 with the line at the rate before it.
    assert sum(waits.values()) <= 3 * pages, waits
