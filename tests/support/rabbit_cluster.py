"""A private RabbitMQ cluster for the tests that lose a broker node: three nodes on loopback, each its own
process, data directory, ports and Erlang node name, sharing their own Erlang cookie.

The shared broker (rabbit@localhost on :5672) is never touched: these nodes skip the system
rabbitmq-env.conf (it names the node rabbit@localhost), take their config from a file of their own and
run as the current user (`/usr/lib/rabbitmq/bin/rabbitmq-server`, not the /usr/sbin wrapper that su's to
rabbitmq). Node names carry the test process's pid and a random token, so parallel or leftover runs
never clash; every node runs in its own process group, killed with SIGKILL at `stop` (and at exit).

Nodes are numbered from 0: `kill(0)` kills the first node, the one the others joined.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from demo.site import free_port

HOST = "127.0.0.1"
RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
START_WITHIN = 120.0  # one node's boot, or a rejoin (a 3-node cluster takes ~25 s here)
GONE_WITHIN = 30.0
CTL_TIMEOUT = 120.0
POLL = 0.5  # seconds between looks; each rabbitmqctl call costs ~1 s of its own anyway
PREFIX = "crawlerha"  # every node name starts so: `kill_leftovers` knows its own
USER = "guest"
PASSWORD = "guest"

_live: weakref.WeakSet[RabbitCluster] = weakref.WeakSet()


@dataclass
class ClusterNode:
    """One node of the cluster: its Erlang name, its ports, where it keeps its files."""

    index: int
    name: str  # e.g. "crawlerha1234xab12n1@localhost": PREFIX, the test process's pid, a token, the number
    amqp_port: int
    mgmt_port: int
    dist_port: int
    directory: Path  # its own files: config, logs, data (`data`)
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        """Its Mnesia base: queues, messages, cluster membership. `restart(wipe=True)` deletes it."""
        return self.directory / "mnesia"

    @property
    def log(self) -> Path:
        """The console output of its rabbitmq-server (the node's own logs are under `directory/log`)."""
        return self.directory / "console.log"

    @property
    def running(self) -> bool:
        """Whether its process is alive (not whether the app in it is running)."""
        return self.process is not None and self.process.poll() is None

    def amqp_url(self, vhost: str = "/") -> str:
        """Its amqp:// URL for `vhost` (quoted: "/" is "%2F")."""
        return f"amqp://{USER}:{PASSWORD}@{HOST}:{self.amqp_port}/{quote(vhost, safe='')}"


class RabbitCommandError(RuntimeError):
    """A rabbitmqctl (or rabbitmq-queues) command failed; the message carries its output."""


class RabbitCluster:
    """`size` RabbitMQ nodes on HOST, clustered; `kill` and `restart` one to lose and regain it."""

    def __init__(self, directory: Path, size: int = 3) -> None:
        server = RABBIT_BIN / "rabbitmq-server"
        if not server.exists() or shutil.which("erl") is None:
            pytest.fail("RabbitMQ is not installed: scripts/services installs it")
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.home = directory / "home"  # HOME of every node and of rabbitmqctl: the Erlang cookie
        self.home.mkdir(exist_ok=True)
        cookie = self.home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(secrets.token_hex(20).upper())
            cookie.chmod(0o400)
        self._env_file = directory / "rabbitmq-env.conf"  # empty: the system one must be skipped
        self._env_file.touch()
        kill_leftovers()
        prefix = f"{PREFIX}{os.getpid()}x{secrets.token_hex(2)}"
        taken: set[int] = set()
        self.nodes: list[ClusterNode] = []
        for index in range(size):
            ports: list[int] = []
            while len(ports) < 3:
                port = free_port(HOST)
                if port not in taken:
                    taken.add(port)
                    ports.append(port)
            node_dir = directory / f"n{index + 1}"
            node_dir.mkdir(exist_ok=True)
            self.nodes.append(
                ClusterNode(
                    index=index,
                    name=f"{prefix}n{index + 1}@localhost",
                    amqp_port=ports[0],
                    mgmt_port=ports[1],
                    dist_port=ports[2],
                    directory=node_dir,
                )
            )
        _live.add(self)

    # -- addresses -------------------------------------------------------------------------------------

    def url(self, vhost: str = "/", nodes: Sequence[int] | None = None) -> str:
        """Comma-separated amqp:// URLs of `nodes` (all by default) for `vhost`."""
        chosen = range(len(self.nodes)) if nodes is None else nodes
        return ",".join(self.nodes[i].amqp_url(vhost) for i in chosen)

    def management_url(self, node: int = 0) -> str:
        """The management API's base URL on `node`, with the guest credentials in it."""
        return f"http://{USER}:{PASSWORD}@{HOST}:{self.nodes[node].mgmt_port}/"

    @property
    def names(self) -> list[str]:
        """The Erlang node names, in order."""
        return [node.name for node in self.nodes]

    # -- commands --------------------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env["HOME"] = str(self.home)
        env["RABBITMQ_CONF_ENV_FILE"] = str(self._env_file)
        env["ERL_EPMD_ADDRESS"] = HOST  # only matters if no epmd runs yet: keep it on loopback
        return env

    def _run(
        self, tool: str, node: int, args: Sequence[str], timeout: float
    ) -> subprocess.CompletedProcess[str]:
        command = [str(RABBIT_BIN / tool), "-q", "-n", self.nodes[node].name, *args]
        try:
            return subprocess.run(
                command,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as error:
            raise RabbitCommandError(f"{' '.join(command[3:])}: no answer within {timeout:g}s") from error

    def _checked(self, tool: str, node: int, args: Sequence[str], timeout: float) -> str:
        done = self._run(tool, node, args, timeout)
        if done.returncode != 0:
            raise RabbitCommandError(
                f"{tool} -n {self.nodes[node].name} {' '.join(args)} exited {done.returncode}:\n"
                f"{done.stdout}{done.stderr}"
            )
        return done.stdout

    def ctl(self, node: int, *args: str, timeout: float = CTL_TIMEOUT) -> str:
        """`rabbitmqctl -q -n <node> args...`: its stdout; raises RabbitCommandError with its output on
        failure."""
        return self._checked("rabbitmqctl", node, args, timeout)

    def queues(self, node: int, *args: str, timeout: float = CTL_TIMEOUT) -> str:
        """`rabbitmq-queues -q -n <node> args...` (quorum queue membership: grow, shrink, ...)."""
        return self._checked("rabbitmq-queues", node, args, timeout)

    def live(self) -> int:
        """The index of a node whose process is up (the first), to ask things of."""
        for node in self.nodes:
            if node.running:
                return node.index
        raise RuntimeError("no node of the cluster is running")

    def add_vhost(self, name: str) -> None:
        """Create the vhost and give guest every permission on it."""
        at = self.live()
        self.ctl(at, "add_vhost", name)
        self.ctl(at, "set_permissions", "-p", name, USER, ".*", ".*", ".*")

    def delete_vhost(self, name: str) -> None:
        """Delete the vhost and everything in it."""
        self.ctl(self.live(), "delete_vhost", name)

    def cluster_status(self, node: int) -> dict[str, Any]:
        """`cluster_status` as `node` sees it (keys: running_nodes, disk_nodes, ...)."""
        status: dict[str, Any] = json.loads(self.ctl(node, "cluster_status", "--formatter", "json"))
        return status

    def running_nodes(self, node: int | None = None) -> set[str]:
        """The names of the nodes `node` (a live one by default) sees running."""
        return set(self.cluster_status(self.live() if node is None else node)["running_nodes"])

    def list_queues(self, vhost: str, *columns: str) -> list[dict[str, Any]]:
        """`list_queues -p vhost columns...` as rows (e.g. columns "name", "leader", "members")."""
        rows: list[dict[str, Any]] = json.loads(
            self.ctl(self.live(), "list_queues", "-p", vhost, *columns, "--formatter", "json")
        )
        return rows

    def leader_of(self, vhost: str, queue: str) -> str:
        """The node name leading quorum queue `queue` in `vhost` (raises if there is no such queue)."""
        for row in self.list_queues(vhost, "name", "leader"):
            if row["name"] == queue:
                return str(row["leader"])
        raise LookupError(f"no queue {queue!r} in vhost {vhost!r}")

    def await_leader(
        self, vhost: str, queue: str, not_on: str | None = None, within: float = START_WITHIN
    ) -> str:
        """Poll until `queue` has a leader on a running node (other than `not_on`, a node name)."""
        deadline = time.monotonic() + within
        up = {node.name for node in self.nodes if node.running}
        leader = ""
        while True:
            try:
                leader = self.leader_of(vhost, queue)
            except (RabbitCommandError, LookupError):
                leader = ""
            if leader in up and leader != not_on:
                return leader
            if time.monotonic() > deadline:
                raise AssertionError(f"queue {queue!r} has no leader on a running node: last {leader!r}")
            time.sleep(POLL)

    def grow(self, node: int, vhost_pattern: str = ".*", queue_pattern: str = ".*") -> None:
        """Add `node` as a member to every quorum queue (matching the patterns): a wiped node that
        rejoined holds none of the queues declared before it was wiped."""
        self.queues(
            self.live(),
            "grow",
            self.nodes[node].name,
            "all",
            "--vhost-pattern",
            vhost_pattern,
            "--queue-pattern",
            queue_pattern,
        )

    # -- processes -------------------------------------------------------------------------------------

    def _write_config(self, node: ClusterNode) -> Path:
        config = node.directory / "rabbitmq.conf"
        config.write_text(
            f"listeners.tcp.local = {HOST}:{node.amqp_port}\n"
            f"management.tcp.port = {node.mgmt_port}\n"
            f"management.tcp.ip = {HOST}\n"
            "loopback_users = none\n"
        )
        return config

    def _spawn(self, node: ClusterNode) -> None:
        if node.running:
            raise RuntimeError(f"{node.name} is already running")
        node.data.mkdir(parents=True, exist_ok=True)
        (node.directory / "log").mkdir(exist_ok=True)
        env = self._env()
        env.update(
            RABBITMQ_CONFIG_FILE=str(self._write_config(node)),
            RABBITMQ_ADVANCED_CONFIG_FILE=str(node.directory / "advanced.config"),  # absent: none
            RABBITMQ_NODENAME=node.name,
            RABBITMQ_DIST_PORT=str(node.dist_port),
            ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}",
            RABBITMQ_MNESIA_BASE=str(node.data),
            RABBITMQ_LOG_BASE=str(node.directory / "log"),
            RABBITMQ_PID_FILE=str(node.directory / "rabbitmq.pid"),
        )
        with node.log.open("ab") as log:
            node.process = subprocess.Popen(
                [str(RABBIT_BIN / "rabbitmq-server")],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: the shell, beam.smp and its helpers
            )

    def _tail(self, node: ClusterNode, lines: int = 30) -> str:
        try:
            return "\n".join(node.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def _await_startup(self, index: int, within: float = START_WITHIN) -> None:
        """Poll `await_startup` until the node answers booted: it fails at once while the node is not
        yet registered in epmd."""
        node = self.nodes[index]
        deadline = time.monotonic() + within
        while True:
            left = max(1.0, deadline - time.monotonic())
            done = self._run("rabbitmqctl", index, ["await_startup", "--timeout", str(int(left))], left + 30)
            if done.returncode == 0:
                return
            if not node.running:
                raise RuntimeError(f"{node.name} exited while booting:\n{self._tail(node)}")
            if time.monotonic() > deadline:
                answer = f"{done.stdout}{done.stderr}"
                raise RuntimeError(f"{node.name} not booted within {within:g}s: {answer}\n{self._tail(node)}")
            time.sleep(POLL)

    def _await_clustered(self, within: float = START_WITHIN) -> None:
        """Poll until every running node sees exactly the running nodes as running, and all `size` nodes
        as members."""
        deadline = time.monotonic() + within
        members = set(self.names)
        while True:
            up = {node.name for node in self.nodes if node.running}
            views: dict[str, object] = {}
            for node in self.nodes:
                if not node.running:
                    continue
                try:
                    status = self.cluster_status(node.index)
                    views[node.name] = (set(status["running_nodes"]), set(status["disk_nodes"]))
                except (RabbitCommandError, ValueError, KeyError) as error:
                    views[node.name] = str(error)
            if all(view == (up, members) for view in views.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"cluster not formed within {within:g}s: running {up}, views {views}")
            time.sleep(POLL)

    def _join(self, index: int) -> None:
        """Make a booted, blank node a member of the cluster of the first other live node."""
        to = next(node for node in self.nodes if node.running and node.index != index)
        self.ctl(index, "stop_app")
        self.ctl(index, "reset")
        self.ctl(index, "join_cluster", to.name)
        self.ctl(index, "start_app")

    def start(self) -> None:
        """Boot every node, join the others to the first, and wait until all run clustered."""
        try:
            for node in self.nodes:
                self._spawn(node)
            with ThreadPoolExecutor(len(self.nodes)) as pool:
                list(pool.map(self._await_startup, range(len(self.nodes))))
            for index in range(1, len(self.nodes)):
                self._join(index)
            self._await_clustered()
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _descendants(root: int) -> list[int]:
        """Pids under `root` in the process tree (by scanning /proc: beam.smp is the shell's child)."""
        children: dict[int, list[int]] = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry.name))
        found: list[int] = []
        todo = [root]
        while todo:
            for child in children.get(todo.pop(), []):
                found.append(child)
                todo.append(child)
        return found

    @staticmethod
    def _alive(pid: int) -> bool:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie no one reaps yet is gone too

    def beam_pid(self, node: int) -> int | None:
        """The pid of the node's beam.smp, if it runs."""
        process = self.nodes[node].process
        if process is None or process.poll() is not None:
            return None
        for pid in self._descendants(process.pid):
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() == "beam.smp":
                    return pid
            except OSError:
                continue
        return None

    def _kill_process(self, node: ClusterNode) -> None:
        process = node.process
        if process is None:
            return
        pids = [process.pid, *self._descendants(process.pid)]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # the whole group: shell, beam.smp, erl_child_setup
        for pid in pids:  # anything that left the group (none should) dies too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        process.wait(timeout=GONE_WITHIN)
        deadline = time.monotonic() + GONE_WITHIN
        while any(self._alive(pid) for pid in pids):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node.name}: processes {pids} still alive after SIGKILL")
            time.sleep(0.05)
        node.process = None

    def kill(self, node: int) -> None:
        """SIGKILL the node's beam.smp (its whole process group) and wait until it is gone and the
        other nodes no longer see it running."""
        target = self.nodes[node]
        if not target.running:
            raise RuntimeError(f"{target.name} is not running")
        self._kill_process(target)
        if any(other.running for other in self.nodes):
            deadline = time.monotonic() + GONE_WITHIN
            while target.name in self.running_nodes():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the cluster still sees {target.name} running")
                time.sleep(POLL)

    def restart(self, node: int, wipe: bool = False) -> None:
        """Start a killed node again (it rejoins with what it kept). `wipe=True`: delete its data first,
        make a live node forget it, boot it blank and join it again: a replaced machine. Waits until
        the cluster runs with it. A wiped node holds no quorum queue declared before: see `grow`."""
        target = self.nodes[node]
        if target.running:
            self.kill(node)
        if wipe:
            shutil.rmtree(target.data, ignore_errors=True)
            if any(other.running for other in self.nodes):
                self.ctl(self.live(), "forget_cluster_node", target.name)
        self._spawn(target)
        self._await_startup(node)
        if wipe and any(other.running and other.index != node for other in self.nodes):
            self._join(node)
        self._await_clustered()

    def stop(self) -> None:
        """SIGKILL every node and wait until all are gone: the data is the test's, nothing to save."""
        errors: list[BaseException] = []
        for node in self.nodes:
            try:
                self._kill_process(node)
            except Exception as error:  # kill the rest regardless
                errors.append(error)
        _live.discard(self)
        if errors:
            raise errors[0]


def _owner(pid: int) -> int | None:
    """The test process that started beam.smp `pid`, if that is one of ours (from its node name)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for variable in environ:
        if variable.startswith(b"RABBITMQ_NODENAME=" + PREFIX.encode()):
            owner = variable.split(b"=", 1)[1][len(PREFIX) :].split(b"x", 1)[0]
            return int(owner) if owner.isdigit() else None
    return None


def kill_leftovers() -> list[int]:
    """SIGKILL the nodes a dead test process left behind (it was killed before it could stop them):
    beam.smp processes named PREFIX<pid>x... whose <pid> is gone. Nodes of live test processes stay."""
    killed: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "beam.smp":
                continue
        except OSError:
            continue
        owner = _owner(int(entry.name))
        if owner is None or owner == os.getpid() or Path(f"/proc/{owner}").exists():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
    return killed


@atexit.register
def _kill_leftovers() -> None:
    for cluster in list(_live):
        with contextlib.suppress(Exception):
            cluster.stop()


@contextlib.contextmanager
def rabbit_cluster(directory: Path, size: int = 3) -> Iterator[RabbitCluster]:
    """A started cluster of `size` nodes in `directory`, always stopped (SIGKILL) on the way out."""
    cluster = RabbitCluster(directory, size)
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def rabbit_ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitCluster]:
    """A 3-node cluster shared by a module's tests (booting one takes ~25 s); stopped after them."""
    with rabbit_cluster(tmp_path_factory.mktemp("rabbit-cluster")) as cluster:
        yield cluster
