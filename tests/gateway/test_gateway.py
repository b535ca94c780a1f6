"""crawler-gateway against real Redis, loopback proxies with their own source addresses, a banning site."""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from redis.asyncio import Redis

from crawler.gateway.metrics import GatewayMetrics
from crawler.gateway.render.metrics import RenderMetrics
from crawler.names import Names
from tests.support.exits import KEY, METRICS_TOKEN, SOURCES, BanningSite, ForwardProxy, Start
from tests.support.wait import until


@pytest.fixture
async def site() -> AsyncIterator[BanningSite]:
    s = await BanningSite("127.0.0.21", pages=20, limit=100).start()
    yield s
    await s.close()


async def ask(base: str, url: str, key: str = KEY, **params: str) -> httpx.Response:
    """The gateway's answer as the envelope (unless json_response says otherwise)."""
    query = {"url": url, "json_response": "true", **params}
    async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
        return await client.get(f"{base}/fetch", params=query, headers={"X-API-Key": key})


async def test_the_envelope_carries_the_answer_its_cost_and_exit(
    site: BanningSite, proxies: list[ForwardProxy], gateway: Start
) -> None:
    base = await gateway(proxies)
    resp = await ask(base, site.url("a.test", "/p/1"), follow_redirects="false", json_response="true")
    assert resp.status_code == 200, resp.text
    env = resp.json()
    assert env["status_code"] == 200 and "<h1>ok</h1>" in env["body"]
    assert env["credits_used"] == 1 and env["exit"] in {"e0", "e1", "e2"}
    assert env["final_url"] == site.url("a.test", "/p/1") and env["duration_ms"] >= 0
    assert site.log[-1][1] == SOURCES[int(env["exit"][1])]  # the site saw the exit's own address
    premium = await ask(base, site.url("a.test", "/p/2"), premium_proxy="true")
    assert premium.status_code == 400 and "no premium exit" in premium.json()["error"]


async def test_keys_budgets_and_the_private_network_guard(
    site: BanningSite, proxies: list[ForwardProxy], gateway: Start, redis: Redis, prefix: str
) -> None:
    base = await gateway(
        proxies, keys=[{"id": "test", "key_env": "GW_TEST_KEY", "budget": 2}], prices={"plain": 1}
    )
    assert (await ask(base, site.url("a.test"), key="wrong")).status_code == 401
    assert (await ask(base, site.url("a.test"), key="")).status_code == 401
    for path in ("/p/1", "/p/2"):
        assert (await ask(base, site.url("a.test", path))).json()["credits_used"] == 1
    spent = await ask(base, site.url("a.test", "/p/3"))
    assert spent.status_code == 402 and "budget" in spent.json()["error"]
    assert float(await redis.get(Names(prefix).gw_credits_key("test"))) == 2
    before = sum(p.requests for p in proxies)
    base2 = await gateway(proxies)  # no budget here; the ledger is the same key's
    for target in ("http://10.0.0.1/", "http://127.0.0.22:1/", "http://169.254.169.254/latest"):
        env = (await ask(base2, target)).json()
        assert env["error"]["kind"] == "refused" and env["credits_used"] == 0, env
    assert sum(p.requests for p in proxies) == before  # refused before any exit was asked


async def test_min_interval_holds_per_exit_and_domain_across_replicas(
    site: BanningSite, proxies: list[ForwardProxy], gateway: Start
) -> None:
    settings = {"min_interval": 0.3, "max_wait": 20}
    bases = [await gateway(proxies, **settings), await gateway(proxies, **settings)]
    answers = await asyncio.gather(
        *(ask(bases[i % 2], site.url("a.test", f"/p/{i}"), timeout="25") for i in range(18))
    )
    assert all(a.json()["status_code"] == 200 for a in answers), [a.text for a in answers]
    for client, hits in site.by_client().items():
        gaps = [b[0] - a[0] for a, b in itertools.pairwise(hits)]
        # Spacing is reserved at send time; the site logs on arrival, a few ms of loopback later.
        assert min(gaps) >= 0.3 - 0.05, (client, gaps)
    assert len(site.by_client()) == 3  # every exit carried part of it


async def test_a_banned_exit_cools_down_and_the_others_carry_the_crawl(
    proxies: list[ForwardProxy], gateway: Start
) -> None:
    site = await BanningSite("127.0.0.21", pages=20, limit=2, ban_for=0.5).start()
    try:
        settings = {"min_interval": 0.1, "max_wait": 20, "cooldown": {"base": 1.0, "max": 4.0, "jitter": 0.1}}
        base = await gateway(proxies, **settings)
        answers = await asyncio.gather(
            *(ask(base, site.url("a.test", f"/p/{i}"), timeout="30") for i in range(20))
        )
    finally:
        await site.close()
    bodies = [a.json() for a in answers if a.status_code == 200]
    assert all(b["status_code"] == 200 for b in bodies)
    assert any(status == 403 for *_, status in site.log), "the site never banned: the test proves nothing"
    for client, hits in site.by_client().items():
        for i, (when, _, status) in enumerate(hits):
            if status == 403 and i + 1 < len(hits):
                assert hits[i + 1][0] - when >= 1.0 * 0.9 - 0.05, (client, hits)
    # The ledger charged only the answers that counted: never a ban.
    assert all(b["credits_used"] == 1 for b in bodies)


async def test_a_hanging_proxy_fails_over_and_a_dead_one_is_marked(
    site: BanningSite, gateway: Start, redis: Redis, prefix: str
) -> None:
    hung = await ForwardProxy("127.0.0.41", "127.0.0.45", hang=True).start()
    good = await ForwardProxy("127.0.0.41", "127.0.0.46").start()
    try:
        settings = {
            "min_interval": 0,
            "dead_after": 2,
            "dead_for": 30,
            "metrics_token_env": "GW_METRICS_TOKEN",
        }
        base = await gateway([hung, good], **settings)
        dead = Names(prefix).gw_dead_key("e0")
        # A failure cools its (exit, domain) pair: e0 fails for every domain only as new ones come.
        for i in range(40):
            env = (await ask(base, site.url(f"h{i}.test", "/p/1"), timeout="2")).json()
            assert env["status_code"] == 200 and env["exit"] == "e1", env
            if await redis.exists(dead):
                break
        assert await redis.exists(dead), "e0 never marked dead"
        answered = hung.requests
        for i in range(3):  # dead: not tried at all, whatever the domain
            assert (await ask(base, site.url("a.test", f"/p/{i}"), timeout="2")).json()["exit"] == "e1"
        assert hung.requests == answered
        async with httpx.AsyncClient(trust_env=False) as client:
            health = (await client.get(f"{base}/healthz")).json()
            metrics = (await client.get(f"{base}/metrics")).text
            operator = {"Authorization": f"Bearer {METRICS_TOKEN}"}
            keyed = (await client.get(f"{base}/metrics", headers=operator)).text
            wrong = (await client.get(f"{base}/metrics", headers={"Authorization": "Bearer nope"})).text
        assert health["ok"] and health["dead"] == ["e0"]
        assert 'crawler_gateway_exit_requests_total{exit="e0",outcome="proxy_failed"}' in metrics
        # Key ids and their credits only to the metrics token's holder.
        assert 'key="' not in metrics and 'key="' not in wrong
        assert 'crawler_gateway_credits_total{key="test"}' in keyed
    finally:
        await hung.close()
        await good.close()


async def test_connections_to_an_exit_are_kept_alive_and_a_restarted_exit_costs_no_failure(
    site: BanningSite, gateway: Start
) -> None:
    exit = await ForwardProxy("127.0.0.41", "127.0.0.42").start()
    try:
        base = await gateway([exit], min_interval=0)
        for i in range(6):
            assert (await ask(base, site.url("a.test", f"/p/{i}"))).json()["status_code"] == 200
        assert (exit.requests, exit.connections) == (6, 1)  # one connection carried all six
        port = int(exit.url.rsplit(":", 1)[1])
        await exit.close()  # the gateway's pooled connection to it is now dead
        await exit.start(port)
        for i in range(3):
            env = (await ask(base, site.url("a.test", f"/p/{10 + i}"))).json()
            assert env["status_code"] == 200 and env["exit"] == "e0", env
        assert (exit.requests, exit.connections) == (9, 2)
        async with httpx.AsyncClient(trust_env=False) as client:
            metrics = (await client.get(f"{base}/metrics")).text
        assert 'outcome="proxy_failed"' not in metrics  # the stale connection was not the exit's failure
        assert 'crawler_gateway_exit_requests_total{exit="e0",outcome="answered"} 9.0' in metrics
    finally:
        await exit.close()


async def test_bad_proxies_yaml_exits_2_naming_the_key(tmp_path: Path) -> None:
    from tests.support.services import REPO, crawler_command

    path = tmp_path / "proxies.yaml"
    path.write_text("exits: [{id: a, url: 'socks5://x'}]\nkeys: [{id: k, key_env: K}]\nmin_intervall: 1\n")
    proc = await asyncio.create_subprocess_exec(
        *crawler_command("crawler-gateway", "--listen", "127.0.0.41:0", "--proxies", str(path)),
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    _, err = await proc.communicate()
    assert proc.returncode == 2
    text = err.decode()
    assert str(path) in text and "exits.0.url" in text and "min_intervall: unknown key" in text


async def test_the_inflight_gauge_counts_requests_held_open(site: BanningSite, gateway: Start) -> None:
    # The gateway's autoscaler reads this gauge (deploy/k8s/gateway/scaledobject.yaml): it must count
    # a request while it waits on its exit and drop back once answered.
    hung = await ForwardProxy("127.0.0.41", "127.0.0.47", hang=True).start()
    try:
        base = await gateway([hung], min_interval=0)

        async def inflight() -> float:
            async with httpx.AsyncClient(trust_env=False) as client:
                text = (await client.get(f"{base}/metrics")).text
            line = next(x for x in text.splitlines() if x.startswith("crawler_gateway_inflight_requests "))
            return float(line.split()[1])

        assert await inflight() == 0
        held = asyncio.create_task(ask(base, site.url("a.test", "/p/1"), timeout="3"))
        await until(inflight, lambda n: n == 1, within=30, what="the request counted in flight")
        await held
        assert await inflight() == 0
    finally:
        await hung.close()


def test_every_gateway_metric_is_documented() -> None:

    doc = (Path(__file__).parents[2] / "docs" / "metrics.md").read_text()
    section = doc.split("## The gateway's metrics", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(crawler_gateway_\w+)`", section, re.M))
    registry = GatewayMetrics().registry
    RenderMetrics(registry)  # a gateway with `render:` adds the renderer's to its registry
    families = {f.name + ("_total" if f.type == "counter" else "") for f in registry.collect()}
    assert listed == families
    assert "/healthz" in section


def test_every_proxies_yaml_key_and_the_fetch_settings_are_documented() -> None:
    from pydantic import BaseModel

    from crawler.gateway.proxies import ApiKey, Cooldown, Exit, Prices, ProxiesConfig

    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()
    section = doc.split("## `config/proxies.yaml`", 1)[1].split("\n## ", 1)[0]
    models: list[tuple[str, type[BaseModel]]] = [
        ("", ProxiesConfig),
        ("", Exit),
        ("", ApiKey),
        ("cooldown.", Cooldown),
        ("prices.", Prices),
    ]
    for prefix, model in models:
        for name in model.model_fields:
            # `cooldown` and `prices` are documented by their keys: `cooldown.base`, ...
            assert f"`{prefix}{name}`" in section or f"`{prefix}{name}." in section, f"{prefix}{name}"
    for key in ("`fetch`", "`fetch_rules`", "`max_credits`", "`api_profile`", "`budget_pause`"):
        assert key in doc, key
    for var in ("CRAWLER_FETCH_API_URL", "CRAWLER_FETCH_API_KEY"):
        assert f"`{var}`" in doc, var


def test_a_key_shorter_than_16_characters_is_refused_naming_it() -> None:
    from crawler.errors import ConfigError
    from crawler.gateway.proxies import parse_proxies

    text = (
        "exits: [{id: e0, url: 'http://127.0.0.41:3128'}]\n"
        "keys: [{id: alice, key_env: GW_ALICE}, {id: bob, key_env: GW_BOB}]\n"
    )
    env = {"GW_ALICE": "short-key", "GW_BOB": "bob-key-0123456789"}
    with pytest.raises(ConfigError) as refused:
        parse_proxies(text, "proxies.yaml", env)
    message = str(refused.value)
    assert "key alice (GW_ALICE holds 9)" in message and "at least 16" in message and "bob" not in message
    assert "short-key" not in message  # the key itself is never said
    parse_proxies(text, "proxies.yaml", env | {"GW_ALICE": "alice-key-0123456"})  # 17: accepted


async def test_a_gateway_stopped_as_soon_as_it_started_stops(
    proxies: list[ForwardProxy], tmp_path: Path, redis: Redis, prefix: str
) -> None:
    # Stopped while its first report is being written: a cancellation landing inside a Redis call
    # must still end the reporter (it once came out as a timeout, and the stop waited for ever).
    from aiohttp import web

    from crawler.gateway.server import Gateway
    from tests.support.exits import ENV, write_proxies

    for i in range(10):
        path = write_proxies(tmp_path / f"p{i}.yaml", proxies, min_interval=0)
        runner = web.AppRunner(Gateway(redis, Names(prefix), str(path), ENV).app(), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.41", 0).start()
        async with asyncio.timeout(20):
            await runner.cleanup()
