"""The whole path with rendering: two consumers share one rendering crawler-gateway; links that only
a script adds are routed, fields are extracted from the rendered DOM, a client-side redirect lands
as its final_url, and each row records whether it was rendered."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
import yaml

from crawler.archive import Archived, read
from crawler.settings import Settings
from crawler.sink.sql import engine_url
from demo.site import free_port
from tests.support.browser import chromium
from tests.support.crawls import dead_letters, finish, seed
from tests.support.exits import ForwardProxy, write_proxies
from tests.support.scripted import ScriptedSite
from tests.support.services import REDIS_URL, crawler_command, env_for
from tests.support.wait import until

KEY = "render-crawl-key-0123456789"


def pages(database_url: str) -> dict[str, tuple[str | None, bool, str | None, float, str | None]]:
    """url -> (final_url, rendered, price field, credits, error)."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            result = conn.execute(sa.text("SELECT url, final_url, rendered, data, credits, error FROM pages"))
            out = {}
            for url, final, rendered, data, credits, error in result:
                if isinstance(data, str):
                    import json

                    data = json.loads(data)
                out[url] = (final, bool(rendered), (data or {}).get("price"), float(credits), error)
            return out
    finally:
        engine.dispose()


async def _rendering(port: int) -> bool:
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5) as client:
            return bool((await client.get(f"http://127.0.0.48:{port}/healthz")).json().get("render"))
    except (httpx.HTTPError, ValueError):
        return False


@pytest.mark.timeout(240)
async def test_two_consumers_crawl_a_scripted_site_through_one_rendering_gateway(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    site = await ScriptedSite("127.0.0.21").start()
    exit_proxy = await ForwardProxy("127.0.0.41", "127.0.0.42").start()
    domains = tmp_path / "domains.yaml"
    rendered = {"via": "api", "render_js": True}
    domains.write_text(
        yaml.safe_dump(
            {
                "defaults": {
                    "timeout": 20,
                    "rate": 50,
                    "burst": 10,
                    "obey_robots": False,
                    "retry_delays": [0.5, 1, 2],
                    "fetch": "api",
                    "archive": True,
                },
                "resolve": {"a.test": site.ip},
                "allow_private_networks": True,
                "domains": {
                    "a.test": {
                        "extract": {"price": "#price"},
                        "fetch_rules": [
                            {
                                "match": "^/$",
                                "fetch": {**rendered, "wait_until": "networkidle", "wait_for": "[data-done]"},
                            },
                            {"match": "^/redirect", "fetch": rendered},
                        ],
                    }
                },
            }
        )
    )
    archive = tmp_path / "archive"
    settings = Settings(amqp_url, REDIS_URL, sqlite_url, str(domains), prefix, archive_dir=str(archive))
    path = write_proxies(
        tmp_path / "p.yaml",
        [exit_proxy],
        min_interval=0,
        render={"browsers": 1, "contexts": 2, "executable": chromium()},
    )
    port = free_port("127.0.0.48")
    gateway = subprocess.Popen(
        crawler_command("crawler-gateway", "--listen", f"127.0.0.48:{port}", "--proxies", str(path)),
        env=env_for(settings) | {"GW_TEST_KEY": KEY},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        await until(lambda: _rendering(port), what="the rendering gateway up", within=60)
        await seed(settings, site.url("a.test"))
        env = env_for(settings) | {
            "CRAWLER_FETCH_API_URL": f"http://127.0.0.48:{port}/fetch",
            "CRAWLER_FETCH_API_KEY": KEY,
        }
        consumers = [
            subprocess.Popen(
                crawler_command("crawler-consume", "--burst"),
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        await asyncio.to_thread(finish, *consumers, timeout=200)
    finally:
        gateway.terminate()
        gateway.communicate(timeout=60)
        await exit_proxy.close()
        await site.close()
    got = pages(sqlite_url)
    home = site.url("a.test")
    assert got[home][1:4] == (True, "12.50", 5.0), got[home]  # rendered, extracted from the DOM, charged 5
    script_links = (
        [f"/item/{i}" for i in range(3)] + ["/late"] + [f"/more/{p}-{i}" for p in (1, 2, 3) for i in (0, 1)]
    )
    for path_ in script_links:
        assert got[site.url("a.test", path_)][1:] == (False, None, 1.0, None), path_
    moved = got[site.url("a.test", "/redirect")]
    assert moved[0] == site.url("a.test", "/landing") and moved[1] is True
    # The landing page's relative link resolves against where the redirect landed.
    assert site.url("a.test", "/from-landing") in got
    assert len(got) == 1 + len(script_links) + 2 and all(v[4] is None for v in got.values()), got
    assert await dead_letters(settings) == []
    # Archived: the page as the site sent it (its script, no price yet), and its DOM as a conversion.
    stored = read(archive, archived_at(sqlite_url, home))
    assert b"createElement('p')" in stored.body and b"12.50" not in stored.body
    assert stored.rendered is not None and b"12.50" in stored.rendered
    assert stored.content_type == "text/html; charset=utf-8"


def archived_at(database_url: str, url: str) -> Archived:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            columns = "warc_file, warc_offset, warc_length, warc_digest, warc_date"
            row = conn.execute(sa.text(f"SELECT {columns} FROM pages WHERE url = :u"), {"u": url}).one()
            return Archived(*row)
    finally:
        engine.dispose()
