"""The open-files limit: a program raises its soft limit to the hard one, and a worker says when even
that is too few for a crawl of many hosts."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from tests.support.services import crawler_command, env_for, settings_for
from tests.support.sites import shops, write_config


def test_a_worker_raises_its_soft_limit_and_says_when_the_hard_one_is_too_low(
    tmp_path: Path, amqp_url: str, prefix: str, sqlite_url: str
) -> None:
    [site] = shops(products=1, hosts=["a.test"])
    settings = settings_for(amqp_url, prefix, sqlite_url, write_config(tmp_path / "d.yaml", [site]))
    command = shlex.join(crawler_command("crawler-consume", "--burst"))
    done = subprocess.run(
        ["bash", "-c", f"ulimit -Sn 256 && ulimit -Hn 1024 && exec {command}"],
        env=env_for(settings),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    # 1,024, not the 256 it was started with: raised to the hard limit, which is still too low.
    assert "open files limited to 1024: a crawl of many hosts" in done.stderr, done.stderr
    assert "ulimit -Hn" in done.stderr
