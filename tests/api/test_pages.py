"""GET /v1/pages and /v1/pages/{id}/versions against the real services: a page's latest state, and its
versions newest first, paged."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from crawler.settings import Settings
from tests.support import api as api_support
from tests.support import versions
from tests.support.api import READER, Api
from tests.support.services import settings_for


@pytest.fixture
def api(amqp_url: str, prefix: str, database_url: str, tmp_path: Path) -> Iterator[Api]:
    config = tmp_path / "domains.yaml"
    config.write_text("domains:\n  shop.test: {}\n  blog.test: {}\n")
    settings: Settings = settings_for(amqp_url, prefix, database_url, config)
    asyncio.run(versions.store(database_url))
    with api_support.running(settings) as running:
        yield running


def refused_without_a_valid_token(api: Api, path: str) -> None:
    for token in (None, "wrong-token-0123456789abcdef"):
        with api.client(token) as client:
            resp = client.get(path)
        assert resp.status_code == 401 and resp.headers["content-type"] == "application/problem+json"


@pytest.mark.timeout(120)
def test_a_page_by_its_url_in_its_latest_state(api: Api) -> None:
    with api.client(READER) as client:
        resp = client.get("/v1/pages", params={"url": versions.LAMP})
        assert resp.status_code == 200, resp.text
        page = resp.json()
        assert page["url"] == versions.LAMP and page["domain"] == "shop.test"
        assert page["version"] == 3 and page["title"] == "a3 title" and page["status_code"] == 200
        assert page["data"] == {"price": 2.0, "stock": 3, "sku": "a3"}
        assert page["fetched_at"] == "2024-05-03T08:00:00Z" and page["crawl"] is None
        assert (page["text"], page["lang"], page["markdown"], page["near_duplicate_of"]) == (
            "a3 text",
            "en",
            None,
            None,
        )
        # Canonicalised as the crawler stores it: the same page.
        again = client.get("/v1/pages", params={"url": "HTTPS://Shop.TEST:443/p/1#reviews"}).json()
        assert again == page
        resp = client.get("/v1/pages", params={"url": "https://shop.test/p/9"})
        assert resp.status_code == 404 and resp.headers["content-type"] == "application/problem+json"
        assert resp.json()["detail"] == "no page is stored for https://shop.test/p/9"
        resp = client.get("/v1/pages")
        assert resp.status_code == 422 and resp.json()["detail"].startswith("query.url: ")
        resp = client.get("/v1/pages", params={"url": "ftp://shop.test/p/1"})
        assert resp.status_code == 422 and "only http and https" in resp.json()["detail"]
    refused_without_a_valid_token(api, f"/v1/pages?url={versions.LAMP}")


@pytest.mark.timeout(120)
def test_a_pages_versions_newest_first_paged(api: Api) -> None:
    with api.client(READER) as client:
        blog = client.get("/v1/pages", params={"url": versions.BLOG}).json()["id"]
        path = f"/v1/pages/{blog}/versions"
        first = client.get(path, params={"limit": 2}).json()
        assert [(v["version"], v["kind"]) for v in first["versions"]] == [(3, "back"), (2, "gone")]
        assert first["page"] == blog and first["next"] == f"{path}?before=2&limit=2"
        gone = first["versions"][1]
        assert gone["status_code"] == 404 and gone["title"] is None and gone["data"] is None
        assert gone["fetched_at"] == "2024-05-02T08:00:00Z"
        second = client.get(first["next"]).json()
        assert [(v["version"], v["kind"]) for v in second["versions"]] == [(1, "new")]
        assert second["next"] is None
        assert second["versions"][0] == {
            "version": 1,
            "kind": "new",
            "fetched_at": "2024-05-01T08:00:00Z",
            "status_code": 200,
            "title": "c1 title",
            "data": {"price": 2.0, "stock": 3, "sku": "c1"},
            "crawl": None,
        }
        every = client.get(path).json()
        assert [v["version"] for v in every["versions"]] == [3, 2, 1] and every["next"] is None
        resp = client.get("/v1/pages/999999/versions")
        assert resp.status_code == 404 and "GET /v1/pages?url=" in resp.json()["detail"]
        for limit in (0, 1001):
            assert client.get(path, params={"limit": limit}).status_code == 422
    refused_without_a_valid_token(api, f"/v1/pages/{blog}/versions")
