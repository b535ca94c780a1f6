"""Crawls for the tests: seed one, run consumers, and read what they stored and set aside."""

from __future__ import annotations

import signal
import subprocess

import aio_pika
import sqlalchemy as sa

from crawler.config import load_config, load_effective
from crawler.names import Names
from crawler.settings import Settings
from crawler.sink.sql import engine_url
from crawler.worker import wiring
from tests.support.services import crawler_command, env_for


def stored(database_url: str) -> list[tuple[str, int | None, str | None]]:
    """(url, status_code, error) of every row, duplicates included."""
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text("SELECT url, status_code, error FROM pages")).all()
            return [(r[0], r[1], r[2]) for r in rows]
    finally:
        engine.dispose()


def consumer(settings: Settings, *args: str) -> subprocess.Popen[str]:
    """Start a `crawler-consume` process."""
    return subprocess.Popen(
        crawler_command("crawler-consume", *args),
        env=env_for(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(*processes: subprocess.Popen[str], timeout: float = 90) -> list[str]:
    """Wait for every process; fail the test with a stderr if one does not exit 0 cleanly; their stderrs."""
    # All are waited for (or killed) before any assertion, so a failure leaves none running.
    errors = []
    for process in processes:
        try:
            _, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            _, err = process.communicate()
            err += f"\n(killed after {timeout}s)"
        errors.append((process.returncode, err))
    for returncode, err in errors:
        assert returncode == 0, err
        assert "Traceback" not in err, err
    return [err for _, err in errors]


def stopped(workers: list[subprocess.Popen[str]], timeout: float = 60) -> list[tuple[int, str]]:
    """Each long-running worker's exit code and stderr after SIGTERM (a graceful drain)."""
    for w in workers:
        if w.poll() is None:
            w.send_signal(signal.SIGTERM)
    out = []
    for w in workers:
        try:
            _, err = w.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            w.kill()
            _, err = w.communicate()
        out.append((w.returncode, err))
    return out


async def seed(settings: Settings, *urls: str) -> None:
    routed = await wiring.seed(settings, load_effective(settings), urls)
    assert len(routed.published) == len(urls)


def rows(database_url: str) -> dict[str, tuple[int | None, str | None, int]]:
    engine = sa.create_engine(engine_url(database_url))
    try:
        with engine.connect() as conn:
            result = conn.execute(sa.text("SELECT url, status_code, error, attempts FROM pages"))
            return {r[0]: (r[1], r[2], r[3]) for r in result}
    finally:
        engine.dispose()


async def dead_letters(settings: Settings) -> list[aio_pika.abc.AbstractIncomingMessage]:
    out = []
    async with await aio_pika.connect(settings.amqp_url) as connection:
        channel = await connection.channel()
        queue = await channel.get_queue(Names(settings.prefix).dead)
        while (message := await queue.get(fail=False)) is not None:
            out.append(message)
        await channel.close()  # not acked: they stay in the queue
    return out


async def run_crawl(settings: Settings, *seeds: str) -> None:
    config = load_config(settings.config_path)
    await wiring.consume(settings, config, burst=True, seeds=seeds)
