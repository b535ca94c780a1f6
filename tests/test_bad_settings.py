"""Every program answers a bad setting, a bad flag or a service it cannot reach in one line on stderr,
with exit 2, within 10 s, and a closed pipe ends a command quietly."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from crawler.sink.database import Database
from crawler.sink.sql import PageRecord, Sink, migrate
from demo.site import free_port
from tests.support.services import AMQP_HOST, crawler_command, env_for, settings_for

WITHIN = 10.0  # seconds a refusal may take on a quiet machine, start-up of the interpreter included
SECRET = "sekrit-pw"  # a password in a bad URL: it must never be printed


@dataclass(frozen=True)
class Program:
    """A program as a user starts it, with the environment it needs beyond the crawl's settings."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@pytest.fixture
def programs(tmp_path: Path) -> dict[str, Program]:
    proxies = tmp_path / "proxies.yaml"
    proxies.write_text(yaml.safe_dump({"exits": [], "keys": [{"id": "test", "key_env": "GW_TEST_KEY"}]}))
    api_env = {"CRAWLER_API_TOKENS": "ops:admin:0123456789abcdef0123456789"}
    return {
        "seed": Program("crawler", ("seed", "http://a.test/")),
        "status": Program("crawler", ("status",)),
        "crawls": Program("crawler", ("crawls", "list")),
        "export": Program("crawler", ("export",)),
        "consume": Program("crawler-consume", ("--burst",)),
        "api": Program("crawler-api", ("--listen", f"127.0.0.1:{free_port('127.0.0.1')}"), api_env),
        "gateway": Program(
            "crawler-gateway",
            ("--listen", f"127.0.0.1:{free_port('127.0.0.1')}", "--proxies", str(proxies)),
            {"GW_TEST_KEY": "k-0123456789abcdef"},
        ),
    }


def amqp(userinfo: str, vhost: str, port: int = 5672) -> str:
    return f"amqp://{userinfo}@{AMQP_HOST}:{port}/{vhost}"


# (setting, bad value, programs that read it, what the one line must say); {vhost} is the test's,
# {closed} a port held closed for it.
SETTINGS: list[tuple[str, str, tuple[str, ...], str]] = [
    (
        "CRAWLER_AMQP_URL",
        "localhost:5672",
        ("seed", "status", "crawls", "consume", "api"),
        "not a RabbitMQ URL",
    ),
    ("CRAWLER_AMQP_URL", "not-a-url", ("seed", "consume", "api"), "not a RabbitMQ URL"),
    ("CRAWLER_AMQP_URL", "http://localhost:5672/", ("seed", "consume", "api"), "not a RabbitMQ URL"),
    (
        "CRAWLER_AMQP_URL",
        f"amqp://guest:{SECRET}@127.0.0.1:{{closed}}/",
        ("seed", "status", "crawls", "consume", "api"),
        "connection refused",
    ),
    (
        "CRAWLER_AMQP_URL",
        amqp(f"guest:{SECRET}", "{vhost}"),
        ("seed", "status", "consume", "api"),
        "refused the login of user 'guest'",
    ),
    (
        "CRAWLER_AMQP_URL",
        amqp("guest:guest", "crawler-test-no-such-vhost"),
        ("seed", "status", "consume", "api"),
        "vhost 'crawler-test-no-such-vhost' does not exist",
    ),
    ("CRAWLER_REDIS_URL", "notaurl", ("seed", "status", "consume", "api", "gateway"), "not a Redis URL"),
    (
        "CRAWLER_REDIS_URL",
        "redis://127.0.0.1:{closed}/0",
        ("seed", "status", "consume", "api", "gateway"),
        "connection refused",
    ),
    (
        "CRAWLER_DATABASE_URL",
        "mysql://x/y",
        ("seed", "status", "export", "consume", "api"),
        "not a database URL",
    ),
    ("CRAWLER_DATABASE_URL", "crawl.db", ("seed", "export", "consume"), "not a database URL"),
    (
        "CRAWLER_DATABASE_URL",
        f"postgresql://postgres:{SECRET}@127.0.0.1:{{closed}}/x",
        ("seed", "status", "export", "consume", "api"),
        "Connection refused",
    ),
    (
        "CRAWLER_DATABASE_URL",
        "sqlite:////nonexistent/directory/crawl.db",
        ("seed", "export", "consume", "api"),
        "unable to open database file",
    ),
    ("CRAWLER_PREFIX", "two words", ("seed", "consume", "api", "gateway"), "CRAWLER_PREFIX='two words'"),
    ("CRAWLER_MANAGEMENT_URL", "localhost:15672", ("status",), "not an HTTP URL"),
    ("CRAWLER_CONFIG", "/nonexistent/domains.yaml", ("seed", "consume", "api"), "cannot read the config"),
    ("CRAWLER_DEDUP", "cuckoo", ("seed", "consume", "api"), "CRAWLER_DEDUP"),
    ("CRAWLER_ARCHIVE_DIR", " ", ("seed", "consume"), "CRAWLER_ARCHIVE_DIR=' ': empty"),
    ("CRAWLER_ARCHIVE_DIR", "s3://Crawl_Data/warc", ("consume",), "is not a bucket name"),
    ("CRAWLER_ARCHIVE_SPOOL", "s3://crawl/spool", ("consume",), "a local directory"),
    ("CRAWLER_S3_ENDPOINT_URL", "minio:9000", ("consume",), "not an HTTP URL"),
]

# (program, its flags, what the one line must say).
FLAGS: list[tuple[str, tuple[str, ...], str]] = [
    ("crawler", ("seed", "--max-depth", "-1", "http://a.test/"), "--max-depth -1"),
    ("crawler", ("seed", "--max-pages", "-3", "http://a.test/"), "--max-pages -3"),
    ("crawler", ("seed", "--priority", "11", "http://a.test/"), "--priority"),
    ("crawler", ("seed", "--only", "nope.test", "http://a.test/"), "nope.test"),
    ("crawler", ("seed", "not-a-url"), "only http and https"),
    ("crawler", ("crawl", "--prefetch", "0", "http://a.test/"), "--prefetch"),
    ("crawler", ("crawls", "show"), "needs a crawl id"),
    ("crawler", ("domains", "pause"), "needs a domain"),
    ("crawler", ("dead", "list", "--reason", "bogus"), "invalid choice: 'bogus'"),
    ("crawler", ("dead", "list", "--limit", "0"), "--limit"),
    ("crawler", ("export", "--domain", "nope.test"), "no page of that domain is stored"),
    ("crawler", ("export", "--since", "last tuesday"), "ISO 8601"),
    ("crawler", ("status", "--interval", "-1"), "--interval"),
    ("crawler-consume", ("--grace", "-5"), "--grace"),
    ("crawler-consume", ("--prefetch", "-1"), "--prefetch"),
    ("crawler-consume", ("--domains", "nope.test"), "nope.test"),
    ("crawler-api", ("--listen", "127.0.0.1:99999"), "--listen"),
    ("crawler-api", ("--listen", f"{AMQP_HOST}:5672"), "cannot listen on"),
    ("crawler-gateway", ("--listen", "nowhere"), "--listen"),
]


@dataclass(frozen=True)
class Ran:
    """How a refused command ended."""

    returncode: int
    stderr: str
    seconds: float


def run(argv: list[str], env: dict[str, str]) -> Ran:
    started = time.monotonic()
    try:
        result = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=3 * WITHIN, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{argv[-3:]} still ran after {3 * WITHIN:g}s: {exc.stderr!r}") from None
    return Ran(result.returncode, result.stderr, time.monotonic() - started)


def within() -> float:
    """Seconds a refusal may take here and now: WITHIN, or three start-ups of a program on a loaded
    machine (a refusal that retries a service it cannot reach takes far longer than either)."""
    started = time.monotonic()
    subprocess.run(
        crawler_command("crawler", "--version"), capture_output=True, timeout=3 * WITHIN, check=True
    )
    return max(WITHIN, 3 * (time.monotonic() - started))


def refused_in_one_line(ran: Ran, says: str, what: str, limit: float = WITHIN) -> None:
    lines = ran.stderr.strip().splitlines()
    assert ran.returncode == 2, f"{what}: exit {ran.returncode}: {ran.stderr}"
    assert len(lines) == 1, f"{what}: {len(lines)} lines: {ran.stderr}"
    assert "Traceback" not in ran.stderr and "object at 0x" not in ran.stderr, f"{what}: {ran.stderr}"
    assert SECRET not in ran.stderr, f"{what}: a password printed: {ran.stderr}"
    assert says in lines[0], f"{what}: {lines[0]!r} does not say {says!r}"
    assert ran.seconds < limit, f"{what}: took {ran.seconds:.1f}s, more than {limit:.1f}s"


@pytest.fixture
def crawl_env(tmp_path: Path, amqp_url: str, prefix: str) -> Iterator[dict[str, str]]:
    config = tmp_path / "domains.yaml"
    config.write_text(yaml.safe_dump({"domains": {"a.test": {}}, "allow_private_networks": True}))
    database = f"sqlite:///{tmp_path / 'crawl.db'}"
    migrate(database)
    yield env_for(settings_for(amqp_url, prefix, database, config))


@pytest.fixture
def closed() -> Iterator[int]:
    """A port bound but never listened on: a connection to it is refused for as long as the test runs
    (a port merely free at import time may be a later test's listening server by then)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.mark.timeout(300)
def test_every_program_refuses_each_bad_setting_in_one_line(
    crawl_env: dict[str, str], programs: dict[str, Program], amqp_url: str, closed: int
) -> None:
    vhost = amqp_url.rsplit("/", 1)[1]
    cases = [
        (
            f"{programs[p].name} {' '.join(programs[p].args)} with {setting}={value}",
            programs[p],
            setting,
            value,
            says,
        )
        for setting, value, names, says in SETTINGS
        for p in names
    ]

    def attempt(case: tuple[str, Program, str, str, str]) -> tuple[str, Ran, str]:
        what, program, setting, value, says = case
        env = {**crawl_env, **program.env, setting: value.format(vhost=vhost, closed=closed)}
        return what, run(crawler_command(program.name, *program.args), env), says

    # Two at a time: the machine's two cores, so each still ends well within its limit.
    limit = within()
    with ThreadPoolExecutor(2) as pool:
        for what, ran, says in pool.map(attempt, cases):
            refused_in_one_line(ran, says, what, limit)


@pytest.mark.timeout(120)
def test_every_program_refuses_bad_flags_in_one_line(
    crawl_env: dict[str, str], programs: dict[str, Program]
) -> None:
    env = {**crawl_env, **programs["api"].env, **programs["gateway"].env}

    def attempt(case: tuple[str, tuple[str, ...], str]) -> tuple[str, Ran, str]:
        program, flags, says = case
        return f"{program} {' '.join(flags)}", run(crawler_command(program, *flags), env), says

    limit = within()
    with ThreadPoolExecutor(2) as pool:
        for what, ran, says in pool.map(attempt, FLAGS):
            refused_in_one_line(ran, says, what, limit)


@pytest.mark.parametrize("program", ["crawler", "crawler-consume", "crawler-api", "crawler-gateway"])
def test_every_program_says_its_version(program: str) -> None:
    from crawler import __version__

    result = subprocess.run(crawler_command(program, "--version"), capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout.strip()) == (0, f"{program} {__version__}"), result.stderr


@pytest.mark.parametrize(
    "args", [("export", "--format", "jsonl"), ("export", "--format", "csv"), ("crawls", "list", "--json")]
)
async def test_a_closed_pipe_ends_a_command_quietly(
    crawl_env: dict[str, str], tmp_path: Path, args: tuple[str, ...]
) -> None:
    database = crawl_env["CRAWLER_DATABASE_URL"]
    sink_db = Database(database)
    sink = Sink(sink_db)
    try:
        await sink.store_many([PageRecord(f"http://a.test/{i}", "a.test", 0, 1) for i in range(50)])
    finally:
        sink_db.close()
    seeded = subprocess.run(
        crawler_command("crawler", "seed", "http://a.test/"), env=crawl_env, capture_output=True, timeout=60
    )
    assert seeded.returncode == 0, seeded.stderr
    # The reader is gone before the command writes a byte: every write meets a closed pipe.
    process = subprocess.Popen(
        crawler_command("crawler", *args), env=crawl_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    process.stdout.close()
    _, err = process.communicate(timeout=60)
    assert process.returncode in (0, 141), err.decode()
    assert err.decode().strip() == "", err.decode()
