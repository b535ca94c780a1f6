"""The pool's two scripts against real Redis: one reservation admits the key and reserves an exit
atomically, one settlement releases, records and charges; replicas share it all."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from redis.asyncio import Redis

from crawler.gateway.pool import Pool
from crawler.gateway.proxies import ApiKey, ProxiesConfig
from crawler.names import Names


def config(**settings: Any) -> ProxiesConfig:
    return ProxiesConfig.model_validate(
        {
            "exits": [{"id": "e0", "url": "http://127.0.0.41:1"}, {"id": "e1", "url": "http://127.0.0.41:2"}],
            "keys": [{"id": "k", "key_env": "K"}],
            **settings,
        }
    )


def rid() -> str:
    return uuid.uuid4().hex


async def test_one_reservation_per_exit_and_domain_within_min_interval_across_replicas(
    redis: Redis, prefix: str
) -> None:
    conf = config(min_interval=5)
    replicas = [Pool(redis, Names(prefix), conf) for _ in range(2)]
    key = ApiKey(id="k", key_env="K", max_concurrency=100)
    exits = list(conf.exits)
    got = await asyncio.gather(
        *(replicas[i % 2].reserve(key, rid(), 1.0, exits, "a.test", None, 10, admit=True) for i in range(40))
    )
    chosen = sorted(g.exit.id for g in got if g.exit is not None)
    assert chosen == ["e0", "e1"]  # each exit once for the domain, however many asked at once
    waits = [g.wait for g in got if g.exit is None]
    assert len(waits) == 38 and all(4 < w <= 5 for w in waits), waits
    # Another domain is another pair: both exits are free for it at once.
    other = [
        await replicas[0].reserve(key, rid(), 1.0, exits, "b.test", None, 10, admit=True) for _ in range(3)
    ]
    assert sorted(o.exit.id for o in other if o.exit is not None) == ["e0", "e1"]


async def test_the_key_s_concurrency_and_budget_are_checked_in_the_same_call(
    redis: Redis, prefix: str
) -> None:
    conf = config(min_interval=0)
    pool = Pool(redis, Names(prefix), conf)
    exits = list(conf.exits)
    capped = ApiKey(id="k", key_env="K", max_concurrency=3)
    ids = [rid() for _ in range(10)]
    got = await asyncio.gather(
        *(pool.reserve(capped, r, 1.0, exits, f"d{i}.test", None, 10, admit=True) for i, r in enumerate(ids))
    )
    admitted = [r for r, g in zip(ids, got, strict=True) if g.refused is None]
    assert len(admitted) == 3 and [g.refused for g in got].count("concurrency") == 7
    # Settled for good, a request stops counting; the next one is admitted.
    first = next(g for g in got if g.refused is None)
    await pool.settle(capped, admitted[0], first.exit, "d.test", "answered", 1.0, final=True)
    assert (await pool.reserve(capped, rid(), 1.0, exits, "x.test", None, 10, admit=True)).refused is None

    budget = ApiKey(id="b", key_env="K", budget=2.5)
    for i in range(2):
        r = rid()
        got_one = await pool.reserve(budget, r, 1.0, exits, f"p{i}.test", None, 10, admit=True)
        assert got_one.exit is not None
        await pool.settle(budget, r, got_one.exit, f"p{i}.test", "answered", 1.0, final=True)
    spent = await pool.reserve(budget, rid(), 1.0, exits, "p9.test", None, 10, admit=True)
    assert spent.refused == "budget" and spent.exit is None
    assert float(await redis.get(Names(prefix).gw_credits_key("b"))) == 2.0
    # A ban is not charged, and the request was not left counted against the key.
    r = rid()
    half = await pool.reserve(budget, r, 0.5, exits, "q.test", None, 10, admit=True)
    await pool.settle(budget, r, half.exit, "q.test", "banned", 0.5, final=True)
    assert float(await redis.get(Names(prefix).gw_credits_key("b"))) == 2.0
    assert await redis.zcard(Names(prefix).gw_key_inflight_key("b")) == 0


async def test_bans_cool_the_pair_and_failures_kill_the_exit(redis: Redis, prefix: str) -> None:
    conf = config(min_interval=0, dead_after=2, cooldown={"base": 10, "max": 40, "jitter": 0})
    names = Names(prefix)
    pool = Pool(redis, names, conf)
    key = ApiKey(id="k", key_env="K")
    e0 = conf.exits[0]
    first = await pool.settle(key, rid(), e0, "a.test", "banned", 1.0, final=True)
    second = await pool.settle(key, rid(), e0, "a.test", "banned", 1.0, final=True)
    assert (first.cooldown, second.cooldown) == (10.0, 20.0)  # backoff doubles per ban in a row
    assert 19_000 < await redis.pttl(names.gw_cool_key("e0", "a.test")) <= 20_000
    # Cooling down for a.test, e0 is skipped for it (until the cooldown ends), not for b.test.
    got = await pool.reserve(key, rid(), 1.0, [e0], "a.test", None, 10, admit=True)
    assert got.exit is None and 19 < got.wait <= 20
    assert (await pool.reserve(key, rid(), 1.0, [e0], "b.test", None, 10, admit=True)).exit == e0
    # An answer ends the streak: the next ban starts from base again.
    await pool.settle(key, rid(), e0, "a.test", "answered", 1.0, final=True)
    assert (await pool.settle(key, rid(), e0, "a.test", "banned", 1.0, final=True)).cooldown == 10.0
    # Proxy failures in a row, whatever the domain, mark it dead: out for every domain.
    assert not (await pool.settle(key, rid(), e0, "c.test", "failed", 1.0, final=True)).died
    assert (await pool.settle(key, rid(), e0, "d.test", "failed", 1.0, final=True)).died
    assert await pool.dead() == [e0]
    assert (await pool.reserve(key, rid(), 1.0, [e0], "e.test", None, 10, admit=True)).wait < 0
    await pool.revive(e0)
    assert (await pool.reserve(key, rid(), 1.0, [e0], "e.test", None, 10, admit=True)).exit == e0


async def test_a_session_sticks_to_its_exit(redis: Redis, prefix: str) -> None:
    conf = config(min_interval=0, session_ttl=60)
    pool = Pool(redis, Names(prefix), conf)
    key = ApiKey(id="k", key_env="K")
    exits = list(conf.exits)
    first = await pool.reserve(key, rid(), 1.0, exits, "a.test", "s1", 10, admit=True)
    assert first.exit is not None
    for order in (exits, exits[::-1], exits):
        again = await pool.reserve(key, rid(), 1.0, order, "a.test", "s1", 10, admit=True)
        assert again.exit == first.exit
    # Banned for the domain, the session moves on and sticks to its new exit.
    await pool.settle(key, rid(), first.exit, "a.test", "banned", 1.0, final=True)
    moved = await pool.reserve(key, rid(), 1.0, exits, "a.test", "s1", 10, admit=True)
    assert moved.exit is not None and moved.exit != first.exit
    assert (await redis.get(Names(prefix).gw_sticky_key("k", "s1"))) == moved.exit.id.encode()


async def test_a_session_name_is_each_key_s_own(redis: Redis, prefix: str) -> None:
    conf = config(min_interval=0, session_ttl=60)
    pool = Pool(redis, Names(prefix), conf)
    alice, bob = ApiKey(id="alice", key_env="A"), ApiKey(id="bob", key_env="B")
    exits = list(conf.exits)
    first = await pool.reserve(alice, rid(), 1.0, exits, "a.test", "cart-1", 10, admit=True)
    assert first.exit is not None
    # Bob's "cart-1" is not alice's: it sticks to no exit of hers, and does not move hers.
    assert await redis.get(Names(prefix).gw_sticky_key("bob", "cart-1")) is None
    for _ in range(6):
        await pool.reserve(bob, rid(), 1.0, exits[::-1], "a.test", "cart-1", 10, admit=True)
    bobs = await redis.get(Names(prefix).gw_sticky_key("bob", "cart-1"))
    assert bobs == exits[-1].id.encode()
    assert await redis.get(Names(prefix).gw_sticky_key("alice", "cart-1")) == first.exit.id.encode()


async def test_concurrent_requests_never_spend_past_the_budget(redis: Redis, prefix: str) -> None:
    conf = config(min_interval=0)
    replicas = [Pool(redis, Names(prefix), conf) for _ in range(2)]
    key = ApiKey(id="b", key_env="K", budget=3)
    exits = list(conf.exits)
    ids = [rid() for _ in range(40)]
    got = await asyncio.gather(
        *(
            replicas[i % 2].reserve(key, r, 1.0, exits, f"d{i}.test", None, 10, admit=True)
            for i, r in enumerate(ids)
        )
    )
    admitted = [(r, g) for r, g in zip(ids, got, strict=True) if g.refused is None]
    assert len(admitted) == 3 and [g.refused for g in got].count("budget") == 37
    # Settled uncharged, a reservation is released: the budget is there for the next request.
    r, g = admitted[0]
    await replicas[0].settle(key, r, g.exit, "d.test", "failed", 1.0, final=True)
    again = rid()
    assert (await replicas[1].reserve(key, again, 1.0, exits, "x.test", None, 10, admit=True)).refused is None
    for r, g in [*admitted[1:], (again, None)]:
        await replicas[0].settle(key, r, g.exit if g else None, "d.test", "answered", 1.0, final=True)
    assert float(await redis.get(Names(prefix).gw_credits_key("b"))) == 3.0
    assert (
        await replicas[0].reserve(key, rid(), 1.0, exits, "y.test", None, 10, admit=True)
    ).refused == "budget"


async def test_a_ban_cools_the_pair_for_its_key_until_several_keys_met_one(redis: Redis, prefix: str) -> None:
    keys = [{"id": k, "key_env": "K"} for k in ("alice", "bob", "carol")]
    conf = config(min_interval=0, keys=keys, ban_quorum=2, cooldown={"base": 10, "max": 40, "jitter": 0})
    names = Names(prefix)
    pool = Pool(redis, names, conf)
    alice, bob, carol = (ApiKey(id=k["id"], key_env="K") for k in keys)
    e0 = conf.exits[0]
    for _ in range(3):  # however often alice meets a ban, it is hers alone
        settled = await pool.settle(alice, rid(), e0, "a.test", "banned", 1.0, final=True)
        assert not settled.fleet
    assert (await pool.reserve(alice, rid(), 1.0, [e0], "a.test", None, 10, admit=True)).exit is None
    assert (await pool.reserve(bob, rid(), 1.0, [e0], "a.test", None, 10, admit=True)).exit == e0
    assert await redis.exists(names.gw_cool_key("e0", "a.test")) == 0
    # A second key meeting a ban there is evidence enough: the pair cools for every key.
    assert (await pool.settle(bob, rid(), e0, "a.test", "banned", 1.0, final=True)).fleet
    assert (await pool.reserve(carol, rid(), 1.0, [e0], "a.test", None, 10, admit=True)).exit is None
    # Failures alike: one key's alone never mark the exit dead.
    e1 = conf.exits[1]
    for i in range(conf.dead_after + 2):
        assert not (await pool.settle(alice, rid(), e1, f"f{i}.test", "failed", 1.0, final=True)).died
    assert (await pool.settle(bob, rid(), e1, "g.test", "failed", 1.0, final=True)).died


async def test_a_replica_s_requests_count_while_it_beats_and_free_their_slots_once_it_lapses(
    redis: Redis, prefix: str
) -> None:
    conf = config(min_interval=0, exits=[{"id": "e0", "url": "http://127.0.0.41:1", "max_inflight": 1}])
    gone, other = Pool(redis, Names(prefix), conf), Pool(redis, Names(prefix), conf)
    await gone.beat()
    await other.beat()
    key = ApiKey(id="k", key_env="K", max_concurrency=2)
    exits = list(conf.exits)
    held = [
        await gone.reserve(key, gone.request_id(), 1.0, exits, "a.test", None, 60, admit=True)
        for _ in range(2)
    ]
    assert held[0].exit is not None and held[1].exit is None  # the exit's one slot, the key's two
    # Alive: its requests hold the key's concurrency and the exit for their whole hold (60 s).
    refused = await other.reserve(key, other.request_id(), 1.0, exits, "a.test", None, 60, admit=True)
    assert refused.refused == "concurrency"
    await gone.leave()  # what a killed replica's entry comes to once it is not renewed
    got = await other.reserve(key, other.request_id(), 1.0, exits, "a.test", None, 60, admit=True)
    assert got.refused is None and got.exit is not None and got.exit.id == "e0"
