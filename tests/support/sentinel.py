"""A private Redis under Sentinel for the tests that lose the Redis master: a master, one replica and
three sentinels, each its own redis-server process on a free loopback port, no data on disk (only
their logs and the sentinels' configs, in the caller's directory).

The shared Redis on :6379 is never touched. There is no redis-sentinel binary: a sentinel is
`redis-server <its config> --sentinel`, and it rewrites that config, so each gets a fresh file of its own
in the caller's directory. `failover` hands the master role over cleanly; `kill_master` SIGKILLs the
master and waits for the sentinels to promote the replica; `revive` brings the killed server back, empty,
as the new master's replica, so the pair can lose a master again.
"""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest
import redis

from demo.site import free_port

T = TypeVar("T")

HOST = "127.0.0.1"
START_WITHIN = 10.0
FAILOVER_WITHIN = 60.0  # a sentinel that just failed over waits 2 x failover-timeout before another
POLL = 0.05
SENTINELS = 3
QUORUM = 2
# Not 1000: a sentinel that switches master makes a fresh link to it and reconnects it only ~1 s later,
# so with 1000 all three sometimes call the new, healthy master down and fail over again (seen here, to an
# empty replica revived a moment before). 2000 leaves the first PING time to be answered.
DOWN_AFTER_MS = 2000
FAILOVER_TIMEOUT_MS = 5000


@dataclass
class RedisProcess:
    """One redis-server (data server or sentinel) on HOST."""

    port: int
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def running(self) -> bool:
        """Whether its process is alive."""
        return self.process is not None and self.process.poll() is None

    def client(self) -> redis.Redis:
        """A fresh client to it (the caller closes it)."""
        return redis.Redis(host=HOST, port=self.port, socket_connect_timeout=1, socket_timeout=5)

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=START_WITHIN)
        self.process = None


def _poll(probe: Callable[[], T], within: float, what: str) -> T:
    """The first true value of `probe()`; probes that raise a redis error count as false."""
    deadline = time.monotonic() + within
    last: object = None
    while True:
        try:
            last = probe()
            if last:
                return last
        except redis.RedisError as error:
            last = error
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within:g}s: {what}; last: {last!r}")
        # Polling servers changing state: this is the condition, not a barrier.
        time.sleep(POLL)


def _flags(state: dict[str, Any]) -> set[str]:
    """The flags of a SENTINEL MASTER / REPLICAS entry (a comma-separated string, or a set in RESP3)."""
    flags = state.get("flags", "")
    return set(flags.split(",")) if isinstance(flags, str) else set(flags)


_live: weakref.WeakSet[SentinelRedis] = weakref.WeakSet()


class SentinelRedis:
    """A master and a replica watched by three sentinels (quorum 2) as `service`."""

    service: str  # the name the sentinels monitor it by

    def __init__(self, directory: Path, service: str = "crawler") -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed: scripts/services installs it")
        self._binary = binary
        self.service = service
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        ports: list[int] = []
        while len(ports) < 2 + SENTINELS:
            port = free_port(HOST)
            if port not in ports:
                ports.append(port)
        self.servers = [RedisProcess(ports[0]), RedisProcess(ports[1])]  # [first master, first replica]
        self.sentinels = [RedisProcess(port) for port in ports[2:]]
        self.failovers = 0
        _live.add(self)

    # -- addresses -------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """redis+sentinel://S1,S2,S3/<service>/0."""
        hosts = ",".join(f"{HOST}:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}/0"

    @property
    def sentinel_addresses(self) -> list[tuple[str, int]]:
        """(host, port) of every sentinel: what redis-py's `Sentinel` takes."""
        return [(HOST, sentinel.port) for sentinel in self.sentinels]

    def _ask(self, sentinel: RedisProcess) -> tuple[str, int] | None:
        client = sentinel.client()
        try:
            answer = client.sentinel_get_master_addr_by_name(self.service)
        finally:
            client.close()
        if not isinstance(answer, tuple):
            return None
        host, port = answer
        return (host.decode() if isinstance(host, bytes) else str(host), int(port))

    def master(self) -> tuple[str, int]:
        """The master's address, as the first sentinel that answers names it."""
        for sentinel in self.sentinels:
            if not sentinel.running:
                continue
            try:
                answer = self._ask(sentinel)
            except redis.RedisError:
                continue
            if answer is not None:
                return answer
        raise RuntimeError(f"no sentinel names a master for {self.service!r}")

    def _server(self, port: int) -> RedisProcess:
        return next(server for server in self.servers if server.port == port)

    def _other(self, port: int) -> RedisProcess:
        return next(server for server in self.servers if server.port != port)

    # -- processes -------------------------------------------------------------------------------------

    def _spawn_server(self, server: RedisProcess, replica_of: int | None) -> None:
        args = [self._binary, "--bind", HOST, "--port", str(server.port), "--dir", str(self.directory)]
        args += ["--save", "", "--appendonly", "no"]  # nothing on disk
        # A replica's full sync lands in memory too (swapdb: never via an RDB file, keeping its old data
        # until the new has loaded); the master streams it without a file (the default in 7.0).
        args += ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        args += ["--repl-diskless-load", "swapdb"]
        args += ["--logfile", str(self.directory / f"redis-{server.port}.log")]
        args += ["--dbfilename", f"dump-{server.port}.rdb"]  # were one ever written, it is the server's own
        if replica_of is not None:
            args += ["--replicaof", HOST, str(replica_of)]
        server.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _poll(lambda: self._ping(server), START_WITHIN, f"redis-server on :{server.port} answers")

    def _spawn_sentinel(self, sentinel: RedisProcess, master_port: int) -> None:
        config = self.directory / f"sentinel-{sentinel.port}.conf"
        config.write_text(  # fresh each time: a sentinel rewrites its config with what it learnt
            f"port {sentinel.port}\n"
            f"bind {HOST}\n"
            f"dir {self.directory}\n"
            f"logfile {self.directory / f'sentinel-{sentinel.port}.log'}\n"
            "sentinel resolve-hostnames no\n"
            f"sentinel monitor {self.service} {HOST} {master_port} {QUORUM}\n"
            f"sentinel down-after-milliseconds {self.service} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {self.service} {FAILOVER_TIMEOUT_MS}\n"
        )
        sentinel.process = subprocess.Popen(
            [self._binary, str(config), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        _poll(lambda: self._ping(sentinel), START_WITHIN, f"sentinel on :{sentinel.port} answers")

    @staticmethod
    def _ping(process: RedisProcess) -> bool:
        if not process.running:
            raise RuntimeError(f"redis-server on :{process.port} exited")
        client = process.client()
        try:
            return bool(client.ping())
        finally:
            client.close()

    @staticmethod
    def _info(server: RedisProcess) -> dict[str, Any]:
        client = server.client()
        try:
            info: dict[str, Any] = client.info("replication")
            return info
        finally:
            client.close()

    def _is_master(self, server: RedisProcess) -> bool:
        return self._info(server).get("role") == "master"

    def _replica_synced(self, replica: RedisProcess, master_port: int) -> bool:
        info = self._info(replica)
        return (
            info.get("role") == "slave"
            and int(info.get("master_port", 0)) == master_port
            and info.get("master_link_status") == "up"
        )

    def _disagreement(self, master_port: int, replica_port: int | None) -> str:
        """What keeps the sentinels from agreeing, "" once every sentinel names `master_port`, is done
        failing over, knows the other sentinels and sees the replica (if any) up."""
        for sentinel in self.sentinels:
            client = sentinel.client()
            try:
                named = self._ask(sentinel)
                if named != (HOST, master_port):
                    return f"sentinel :{sentinel.port} names {named}"
                state = cast(dict[str, Any], client.sentinel_master(self.service))
                if _flags(state) != {"master"}:  # no s_down, o_down, failover_in_progress ...
                    return f"sentinel :{sentinel.port} flags the master {state.get('flags')}"
                others = cast(list[dict[str, Any]], client.sentinel_sentinels(self.service))
                if len(others) < SENTINELS - 1:
                    return f"sentinel :{sentinel.port} knows {len(others)} other sentinels"
                if replica_port is not None:
                    listed: list[dict[str, Any]] = client.sentinel_slaves(self.service)
                    replicas = {int(r["port"]): r.get("flags") for r in listed}
                    if _flags({"flags": replicas.get(replica_port, "")}) != {"slave"}:
                        return f"sentinel :{sentinel.port} sees replicas {replicas}"
            finally:
                client.close()
        return ""

    def _settle(self, master: RedisProcess, replica: RedisProcess | None, within: float) -> None:
        """Wait until `master` says it is master, `replica` (if any) is in sync with it, and every
        sentinel agrees on both."""
        _poll(lambda: self._is_master(master), within, f":{master.port} reports role:master")
        if replica is not None:
            _poll(
                lambda: self._replica_synced(replica, master.port),
                within,
                f":{replica.port} replicates :{master.port}",
            )
        # Not the replica's master-link-status as a sentinel reports it: a sentinel refreshes it from
        # the replica's INFO only every 10 s (every 1 s once the master is down); asked of it above.
        last = [""]

        def agreed() -> bool:
            last[0] = self._disagreement(master.port, None if replica is None else replica.port)
            return not last[0]

        try:
            _poll(agreed, within, f"sentinels agree on master :{master.port}")
        except AssertionError as error:
            raise AssertionError(f"{error}: {last[0]}") from None

    def start(self) -> None:
        """Start the master, the replica, then the sentinels; wait until they agree on both."""
        try:
            master, replica = self.servers
            self._spawn_server(master, None)
            self._spawn_server(replica, master.port)
            _poll(lambda: self._replica_synced(replica, master.port), START_WITHIN, "replica in sync")
            for sentinel in self.sentinels:
                self._spawn_sentinel(sentinel, master.port)
            # Sentinels find each other by hello messages every 2 s on the master.
            self._settle(master, replica, START_WITHIN + 20)
        except BaseException:
            self.stop()
            raise

    def failover(self) -> None:
        """SENTINEL FAILOVER: the replica becomes master, the old master its replica; waits until the
        sentinels name the new master, it reports role:master and the old one replicates it."""
        _, port = self.master()
        old, new = self._server(port), self._other(port)
        if not new.running:
            raise RuntimeError("no replica to fail over to: `revive` the killed server first")
        # A sentinel refuses while a failover is in progress, or before it knows the replica is fine.
        sentinel = next(s for s in self.sentinels if s.running)
        client = sentinel.client()
        try:
            _poll(
                lambda: client.sentinel_failover(self.service), FAILOVER_WITHIN, "SENTINEL FAILOVER accepted"
            )
        finally:
            client.close()
        _poll(lambda: self._is_master(new), FAILOVER_WITHIN, f":{new.port} promoted")
        # The sentinels turn the old master into the new one's replica only ~10 s later (at their next
        # INFO of it): do it now, as they would.
        _poll(lambda: self._replicate(old, new), FAILOVER_WITHIN, f":{old.port} made a replica")
        self._settle(new, old, FAILOVER_WITHIN)
        self.failovers += 1

    def _replicate(self, replica: RedisProcess, master: RedisProcess) -> bool:
        client = replica.client()
        try:
            if int(self._info(replica).get("master_port", 0)) != master.port:
                client.replicaof(HOST, master.port)
            return True
        finally:
            client.close()

    def kill_master(self) -> None:
        """SIGKILL the master; wait until the sentinels promote the replica and it reports role:master.
        The killed server stays down (the sentinels keep it as a down replica) until `revive`."""
        _, port = self.master()
        old, new = self._server(port), self._other(port)
        if not new.running:
            raise RuntimeError("no replica to promote: `revive` the killed server first")
        old.kill()
        _poll(lambda: self._is_master(new), FAILOVER_WITHIN, f"replica :{new.port} promoted")
        _poll(
            lambda: all(self._ask(s) == (HOST, new.port) for s in self.sentinels),
            FAILOVER_WITHIN,
            f"sentinels name :{new.port}",
        )
        self.failovers += 1

    def revive(self) -> None:
        """Start the killed server again, empty, as the current master's replica; wait until it is in
        sync and every sentinel sees it healthy."""
        dead = next((server for server in self.servers if not server.running), None)
        if dead is None:
            return
        _, port = self.master()
        master = self._server(port)
        self._spawn_server(dead, master.port)
        self._settle(master, dead, FAILOVER_WITHIN)

    def stop(self) -> None:
        """SIGKILL everything: nothing is on disk, nothing to save."""
        for process in [*self.sentinels, *self.servers]:
            process.kill()
        _live.discard(self)


@atexit.register
def _kill_leftovers() -> None:
    for group in list(_live):
        with contextlib.suppress(Exception):
            group.stop()


@contextlib.contextmanager
def sentinel_redis(directory: Path, service: str = "crawler") -> Iterator[SentinelRedis]:
    """A started master + replica + 3 sentinels in `directory`, always stopped on the way out."""
    group = SentinelRedis(directory, service)
    group.start()
    try:
        yield group
    finally:
        group.stop()


@pytest.fixture
def redis_sentinel(tmp_path: Path) -> Iterator[SentinelRedis]:
    """A private Redis under Sentinel the test may fail over or lose the master of; stopped after it."""
    with sentinel_redis(tmp_path / "sentinel") as group:
        yield group
