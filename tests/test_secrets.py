"""No secret in any output: a gateway, a worker and the API run with planted secrets (proxy credentials,
the gateway's API key and metrics token, the API's tokens, the broker's and the database's passwords),
an exit refuses every CONNECT, and every output of the run is searched for them: HTTP answers, the
three programs' logs, /metrics, the dead letters, the stored rows' errors and what Redis holds."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import aio_pika
import httpx
import pytest
import redis.asyncio as aioredis
import sqlalchemy as sa
import yaml
from aiohttp import web

from crawler.settings import Settings
from crawler.sink.sql import engine_url, migrate
from demo.site import free_port
from tests.support import api as api_support
from tests.support.crawls import seed
from tests.support.exits import ForwardProxy, TunnelProxy
from tests.support.services import AMQP_HOST, AUTH, MANAGEMENT, REDIS_URL, crawler_command, env_for
from tests.support.wait import until

VENDOR_USER, VENDOR_PASSWORD = "vendor-user-7d1f", "Vendor-P4ssw0rd-9c2e"
GATEWAY_KEY = "gw-key-planted-5b8a1c7e"
METRICS_TOKEN = "metrics-planted-3e9d4f20"
ADMIN_TOKEN, READ_TOKEN = "api-admin-planted-0a6b2d", "api-read-planted-4c1e8f"
AMQP_PASSWORD = "amqp-planted-P4ss-61d0"
DB_PASSWORD = "db-planted-P4ss-2f7a"
SECRETS = [VENDOR_USER, VENDOR_PASSWORD, GATEWAY_KEY, METRICS_TOKEN, ADMIN_TOKEN, READ_TOKEN]
SECRETS += [AMQP_PASSWORD, DB_PASSWORD]
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def amqp_user(amqp_url: str) -> Iterator[str]:
    """A broker user of the test's own with a planted password, on the test's vhost; deleted after."""
    vhost = amqp_url.rsplit("/", 1)[1]
    user = f"crawler-secrets-{uuid.uuid4().hex[:8]}"
    with httpx.Client(base_url=MANAGEMENT, auth=AUTH, timeout=30, trust_env=False) as api:
        api.put(f"/api/users/{user}", json={"password": AMQP_PASSWORD, "tags": ""}).raise_for_status()
        try:
            everything = {"configure": ".*", "write": ".*", "read": ".*"}
            api.put(f"/api/permissions/{vhost}/{user}", json=everything).raise_for_status()
            yield f"amqp://{user}:{quote(AMQP_PASSWORD)}@{AMQP_HOST}:5672/{vhost}"
        finally:
            api.delete(f"/api/users/{user}")


@pytest.fixture
async def site() -> AsyncIterator[int]:
    async def page(request: web.Request) -> web.Response:
        links = "" if request.path != "/" else '<a href="/p/1">one</a>'
        return web.Response(
            text=f"<html><title>{request.path}</title>{links}</html>", content_type="text/html"
        )

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port("127.0.0.21")
    await web.TCPSite(runner, "127.0.0.21", port).start()
    yield port
    await runner.cleanup()


def leaks(what: str, text: str) -> list[str]:
    return [f"{what}: {secret}" for secret in SECRETS if secret in text]


async def test_no_planted_secret_reaches_any_output(
    tmp_path: Path, amqp_user: str, pg_url: str, prefix: str, site: int
) -> None:
    database = pg_url.replace("postgresql://postgres@", f"postgresql://postgres:{DB_PASSWORD}@")
    migrate(database)
    # The worker's first node is down: its failover tries it (and says so) with the planted password.
    dead_node = amqp_user.replace(f"{AMQP_HOST}:5672", "127.0.0.1:1")
    refusing = await TunnelProxy(
        "127.0.0.41", "127.0.0.42", credentials=(VENDOR_USER, VENDOR_PASSWORD), refuse=True
    ).start()
    plain = await ForwardProxy("127.0.0.41", "127.0.0.43").start()
    proxies = tmp_path / "proxies.yaml"
    proxies.write_text(
        yaml.safe_dump(
            {
                "exits": [
                    {
                        "id": "e0",
                        "url": refusing.url,
                        "country": "DE",
                        "username_env": "VU",
                        "password_env": "VP",
                    },
                    {"id": "e1", "url": plain.url, "country": "FR"},
                ],
                "keys": [{"id": "fleet", "key_env": "GW_KEY"}],
                "metrics_token_env": "GW_METRICS",
                "min_interval": 0,
                "max_wait": 0.5,
                "cooldown": {"base": 0.05, "max": 0.2},
                "resolve": {"a.test": "127.0.0.21", "secure.test": "127.0.0.21"},
                "allow_networks": ["127.0.0.21/32"],
            }
        )
    )
    domains = tmp_path / "domains.yaml"
    domains.write_text(
        yaml.safe_dump(
            {
                "defaults": {"retry_delays": [0.1], "timeout": 5, "obey_robots": False, "sitemaps": False},
                "domains": {
                    "a.test": {"fetch": {"via": "api", "country": "fr"}},
                    "secure.test": {"fetch": {"via": "api", "country": "de"}},
                },
            }
        )
    )
    settings = Settings(amqp_user, REDIS_URL, database, str(domains), prefix)
    gw_port = free_port("127.0.0.48")
    gw_base = f"http://127.0.0.48:{gw_port}"
    secrets_env = {
        "VU": VENDOR_USER,
        "VP": VENDOR_PASSWORD,
        "GW_KEY": GATEWAY_KEY,
        "GW_METRICS": METRICS_TOKEN,
    }
    gateway = subprocess.Popen(
        crawler_command(
            "crawler-gateway", "-v", "--listen", f"127.0.0.48:{gw_port}", "--proxies", str(proxies)
        ),
        env=env_for(settings) | secrets_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    found: list[str] = []
    try:

        async def up() -> bool:
            try:
                async with httpx.AsyncClient(trust_env=False, timeout=2) as client:
                    return (await client.get(f"{gw_base}/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await until(up, what="the gateway answering", within=30)
        https_page = f"https://secure.test:{site}/"
        await seed(settings, f"http://a.test:{site}/", https_page)
        worker_env = env_for(settings) | {
            "CRAWLER_AMQP_URL": f"{dead_node},{amqp_user}",
            "CRAWLER_FETCH_API_URL": f"{gw_base}/fetch",
            "CRAWLER_FETCH_API_KEY": GATEWAY_KEY,
        }
        worker = subprocess.Popen(
            crawler_command("crawler-consume", "--burst", "-v"),
            env=worker_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        out, err = await asyncio.to_thread(worker.communicate, timeout=120)
        assert worker.returncode == 0, err
        found += leaks("worker log", out + err)

        # The gateway's answers, as a client asking it directly sees them.
        async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
            key = {"X-API-Key": GATEWAY_KEY}
            for params in ({"json_response": "true"}, {}):
                answer = await client.get(
                    f"{gw_base}/fetch", params={"url": https_page, **params}, headers=key
                )
                assert answer.status_code == 503, answer.text
                found += leaks("gateway answer", answer.text + str(answer.headers))
            for path in ("/metrics", "/healthz"):
                for headers in ({}, {"Authorization": f"Bearer {METRICS_TOKEN}"}):
                    answer = await client.get(f"{gw_base}{path}", headers=headers)
                    found += leaks(f"gateway {path}", answer.text)
            wrong = await client.get(
                f"{gw_base}/fetch", params={"url": https_page}, headers={"X-API-Key": "no"}
            )
            found += leaks("gateway 401", wrong.text)

        # The API, as its read and admin tokens (and a wrong one) see the run.
        tokens = f"ops:admin:{ADMIN_TOKEN},dash:read:{READ_TOKEN}"
        with api_support.running(settings, tokens) as api:
            for token in (READ_TOKEN, ADMIN_TOKEN, "wrong-token-0123456789"):
                with api.client(token) as client:
                    for path in ("/v1/dead", "/v1/dead/summary", "/v1/domains", "/v1/fleet", "/v1/crawls",
                                 "/v1/metrics", "/v1/readyz", "/v1/whoami", "/openapi.json"):  # fmt: skip
                        answer = client.get(path)
                        found += leaks(f"API {path}", answer.text + str(answer.headers))
                with api.client(READ_TOKEN) as client:
                    dead = client.get("/v1/dead").json()["dead"]
        found += leaks("API log", api.log)
        assert [d["url"] for d in dead] == [https_page], dead  # the refused page was set aside
        assert "no exit could carry the request" in dead[0]["error"]

        # What the run left behind: dead letters as RabbitMQ holds them, rows, Redis.
        async with await aio_pika.connect(amqp_user) as connection:
            channel = await connection.channel()
            queue = await channel.get_queue(settings.names.dead)
            while (message := await queue.get(fail=False)) is not None:
                found += leaks("dead letter", message.body.decode("utf-8", "replace") + str(message.headers))
        engine = sa.create_engine(engine_url(database))
        try:
            with engine.connect() as conn:
                for row in conn.execute(sa.text("SELECT * FROM pages")):
                    found += leaks("stored row", str(tuple(row)))
        finally:
            engine.dispose()
        client = aioredis.Redis.from_url(REDIS_URL)
        try:
            async for name in client.scan_iter(match=f"{prefix}:*"):
                if await client.type(name) == b"string":
                    found += leaks(f"redis {name!r}", str(await client.get(name)))
                elif await client.type(name) == b"hash":
                    found += leaks(f"redis {name!r}", str(await client.hgetall(name)))
        finally:
            await client.aclose()
    finally:
        gateway.terminate()
        out, err = await asyncio.to_thread(gateway.communicate, timeout=30)
        await refusing.close()
        await plain.close()
    found += leaks("gateway log", out + err)
    assert refusing.authorizations and all(a is not None for a in refusing.authorizations)  # creds were sent
    assert "error " in err  # the gateway logged the errors it answered with ids
    assert found == [], found
