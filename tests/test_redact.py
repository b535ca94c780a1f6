"""Passwords never shown: not in log lines, errors, tracebacks or any command's output."""

from __future__ import annotations

import logging
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest
import redis

from crawler.redact import RedactingFormatter, redact
from crawler.settings import Settings
from demo.site import serve
from tests.support import services
from tests.support.services import settings_for
from tests.support.sites import reachable, shops, write_config


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("amqp://guest:guest@localhost:5672/", "amqp://guest:***@localhost:5672/"),
        ("amqp://u:p@ss@host/vh", "amqp://u:***@host/vh"),  # an unescaped @ in the password
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://default:pw@h/0", "rediss://default:***@h/0"),
        ("postgresql+psycopg://u:p%40w@db/x", "postgresql+psycopg://u:***@db/x"),
        ("postgresql://db/x?password=pw&sslmode=off", "postgresql://db/x?password=***&sslmode=off"),
        ("host=db password=pw user=u", "host=db password=*** user=u"),
        ("host=db password='a b' user=u", "host=db password=*** user=u"),
        ("error at amqp://a:b@c/ and redis://:d@e/", "error at amqp://a:***@c/ and redis://:***@e/"),
        ("http://shop.test/a@b?x=1", "http://shop.test/a@b?x=1"),  # no password: left alone
        # A paid API's key in a query string, a token, a credential header quoted in a text.
        (
            "url='http://api.test/v1/?api_key=SB-KEY-1&url=http%3A%2F%2Fa.test%2F'",
            "url='http://api.test/v1/?api_key=***&url=http%3A%2F%2Fa.test%2F'",
        ),
        ("GET /?apikey=k1&x=1 and ?access_token=t2", "GET /?apikey=***&x=1 and ?access_token=***"),
        ("{'X-API-Key': 'gw-key-123'}", "{'X-API-Key': '***'}"),
        ("Proxy-Authorization: Basic dXNlcjpwYXNz", "Proxy-Authorization: Basic ***"),
        ("Authorization: Bearer tok-123", "Authorization: Bearer ***"),
        ("http://shop.test:8080/path", "http://shop.test:8080/path"),
    ],
)
def test_redact(text: str, shown: str) -> None:
    assert redact(text) == shown


def test_every_part_of_a_log_line_is_redacted() -> None:
    formatter = RedactingFormatter("%(levelname)s %(message)s")
    try:
        raise ConnectionError("cannot reach amqp://u:sekret@broker/")
    except ConnectionError:
        record = logging.LogRecord(
            "x", logging.ERROR, __file__, 1, "via %s", ("redis://:sekret@cache/0",), exc_info=True
        )
        record.exc_info = sys.exc_info()
    line = formatter.format(record)
    assert "sekret" not in line
    assert "redis://:***@cache/0" in line and "amqp://u:***@broker/" in line


@pytest.fixture
def secret() -> str:
    """A password no output could contain by chance; '@' and ':' make it need escaping in a URL."""
    return f"S3cr3t{uuid.uuid4().hex[:12]}@:x"


@pytest.fixture
def amqp_user(amqp_url: str, secret: str) -> Iterator[str]:
    """The test vhost's AMQP URL as a user of its own, with `secret` as password."""
    name = f"crawler-test-{uuid.uuid4().hex[:8]}"
    vhost = amqp_url.rsplit("/", 1)[1]
    api = httpx.Client(base_url=services.MANAGEMENT, auth=services.AUTH, timeout=30, trust_env=False)
    with api:
        api.put(f"/api/users/{name}", json={"password": secret, "tags": ""}).raise_for_status()
        everything = {"configure": ".*", "write": ".*", "read": ".*"}
        api.put(f"/api/permissions/{vhost}/{name}", json=everything).raise_for_status()
        try:
            yield f"amqp://{name}:{quote(secret, safe='')}@{services.AMQP_HOST}:5672/{vhost}"
        finally:
            api.delete(f"/api/users/{name}")


@pytest.fixture
def redis_user(prefix: str, secret: str) -> Iterator[str]:
    """A Redis URL of an ACL user with `secret` as password, allowed the test's keys only."""
    name = f"crawler-test-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(services.REDIS_URL)
    try:
        client.acl_setuser(
            name, enabled=True, passwords=[f"+{secret}"], keys=[f"{prefix}:*"], categories=["+@all"]
        )
        base = urlsplit(services.REDIS_URL)
        yield f"redis://{name}:{quote(secret, safe='')}@{base.hostname}:{base.port or 6379}{base.path}"
    finally:
        client.acl_deluser(name)
        client.close()


def leaks(result: subprocess.CompletedProcess[str], secret: str) -> list[str]:
    """Lines of a command's output that show the password or its URL-escaped form."""
    token = secret[:18]  # the unique part, the same escaped or not
    return [line for line in (result.stdout + result.stderr).splitlines() if token in line]


def test_no_command_shows_a_password(
    tmp_path: Path, amqp_user: str, redis_user: str, pg_url: str, prefix: str, secret: str
) -> None:
    pg = urlsplit(pg_url)
    # Trust authentication ignores the password, but every layer still carries it.
    database_url = pg._replace(netloc=f"postgres:{quote(secret, safe='')}@{pg.hostname}:{pg.port}").geturl()
    sites = shops(products=3, hosts=["a.test"])
    settings = settings_for(amqp_user, prefix, database_url, write_config(tmp_path / "d.yaml", sites))
    outputs = []
    with serve(*sites):
        crawl = services.run("crawler", ["crawl", "-v", sites[0].url()], settings)
        assert crawl.returncode == 0, crawl.stderr
        assert f"{len(reachable(sites))} pages" in crawl.stdout  # the passwords were really used
        outputs.append(crawl)
        for args in (["status"], ["status", "--json"], ["seed", "-v", sites[0].url("/product/1")]):
            result = services.run("crawler", args, settings)
            assert result.returncode == 0, result.stderr
            outputs.append(result)
        outputs.append(services.run("crawler-consume", ["--burst", "-v"], settings))
    # Refused, unreachable or wrong: the error names the service, without the password.
    wrong = amqp_user.replace(quote(secret, safe=""), quote(secret + "-wrong", safe=""))
    failing: list[Settings] = [
        replace(settings, amqp_url=wrong),
        replace(settings, redis_url=f"redis://:{quote(secret, safe='')}@127.0.0.1:1/0"),
        replace(settings, database_url=f"postgresql://u:{quote(secret, safe='')}@127.0.0.1:1/x"),
    ]
    for broken in failing:
        result = services.run("crawler", ["crawl", "-v", sites[0].url()], broken)
        assert result.returncode == 2, result.stderr
        assert "***" in result.stderr  # the URL is shown, its password hidden
        outputs.append(result)
    for result in outputs:
        assert leaks(result, secret) == [], result.args
