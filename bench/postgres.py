"""A private PostgreSQL cluster, for runs that restart the database mid-crawl (bench.chaos, the tests).

The shared PostgreSQL on :5432 is never restarted: a run that needs the database to go away gets a
cluster of its own (initdb, pg_ctl from the installed PostgreSQL's binaries) on a free loopback port
and data directory, trust auth, and restarts it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from demo.site import free_port

HOST = "127.0.0.1"
START_WITHIN = 60  # seconds pg_ctl waits for the server to take connections


def _binaries() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if not found:
        raise RuntimeError(
            "no PostgreSQL installed (/usr/lib/postgresql/*/bin): scripts/services installs it"
        )
    return Path(found[-1]).parent


class PrivatePostgres:
    """One PostgreSQL cluster of its own: `restart` (fast or immediate, a crash) keeps its data."""

    def __init__(self, base: Path) -> None:
        self._bin = _binaries()
        self.port = free_port(HOST)
        self.data = base / "data"
        self._base = base
        # PostgreSQL refuses to run as root: as its own user, if we are root.
        self._user = "postgres" if os.geteuid() == 0 else None
        self.restarts = 0

    @property
    def server_url(self) -> str:
        """Its URL without a database."""
        return f"postgresql://postgres@{HOST}:{self.port}"

    def url(self, database: str = "postgres") -> str:
        """The URL of one of its databases."""
        return f"{self.server_url}/{database}"

    def _run(self, *argv: str, timeout: float = START_WITHIN + 30) -> None:
        command = [str(self._bin / argv[0]), *argv[1:]]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(argv[:2])} failed ({done.returncode}): {done.stderr or done.stdout}"
            )

    def init(self) -> None:
        """Make the cluster: trust auth, listening on HOST:port only, its socket in its own directory."""
        if self._user is not None:
            uid = pwd.getpwnam(self._user).pw_uid
            os.chown(self._base, uid, -1)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"\nport = {self.port}\nlisten_addresses = '{HOST}'\n"
                f"unix_socket_directories = '{self._base}'\nfsync = off\nmax_connections = 200\n"
            )

    def start(self) -> None:
        """Start it and wait until it takes connections."""
        log = self._base / "postgres.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-w", "-t", str(START_WITHIN), "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop it: `fast` rolls back what is under way; `immediate` is a crash (recovered at start)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        """Stop and start again on the same address; committed data stays."""
        self.stop(mode)
        self.start()
        self.restarts += 1

    def running(self) -> bool:
        """Whether its server is up."""
        command = [str(self._bin / "pg_ctl"), "-D", str(self.data), "status"]
        if self._user is not None:
            command = ["runuser", "-u", self._user, "--", *command]
        return subprocess.run(command, capture_output=True, check=False, timeout=30).returncode == 0


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A private cluster, started; stopped and deleted after. Its directory is one PostgreSQL's own
    user can reach (a test's tmp_path is root's alone)."""
    base = Path(tempfile.mkdtemp(prefix="crawler-pg-"))
    base.chmod(0o755)
    server = PrivatePostgres(base)
    try:
        server.init()
        server.start()
        yield server
    finally:
        if server.running():
            server.stop("immediate")
        shutil.rmtree(base, ignore_errors=True)
