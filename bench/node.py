"""A private RabbitMQ node on loopback, for runs that disturb a whole node (alarms, restarts).

A memory watermark or a restart is node-wide: on the shared node at :5672 it would hit everyone else's
crawls and tests. This node has its own name, ports, data and logs (all under one directory), no
plugins unless asked for its management API (then on a port of its own, never the shared node's
:15672) and its own Erlang cookie.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT = 120.0  # seconds: the node boots in ~10 s idle, much slower on a loaded machine
CTL_TIMEOUT = 120.0
# rabbitmqctl itself takes a distribution port at the node's dist port + 10000 .. + 10010; keep
# the node's ports low enough for that, and clear of the shared node's 5672, 25672 and 35672-35682.
PORTS = (40000, 45000)
_AVOID = range(35600, 35700)
LIB = Path("/usr/lib/rabbitmq/bin")  # Debian's scripts, without the wrapper that su's to `rabbitmq`
ERL_CALL = Path("/usr/lib/erlang/bin/erl_call")


class NodeError(RuntimeError):
    """The private node did not start, or a rabbitmqctl command against it failed."""


def _script(name: str) -> str:
    if (LIB / name).exists():
        return str(LIB / name)
    found = shutil.which(name)
    if found is None:
        raise NodeError(f"{name} is not installed: install RabbitMQ (bash scripts/services) first")
    return found


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports() -> tuple[int, int]:
    """An AMQP port and a distribution port, both free, with the CLI's range above them free too."""
    for _ in range(200):
        port = random.randrange(*PORTS)
        wanted = (port, port + 1, port + 1 + 10000)
        if all(p not in _AVOID and _bindable(p) for p in wanted):
            return port, port + 1
    raise NodeError(f"no free pair of ports in {PORTS[0]}-{PORTS[1]} on 127.0.0.1")


@dataclass(slots=True)
class Node:
    """A running private node: where it listens and how to steer it with rabbitmqctl."""

    name: str
    port: int
    dist_port: int
    base: Path
    env: dict[str, str] = field(repr=False)
    management_port: int | None = None  # its management API's, if it has one

    @property
    def management_url(self) -> str:
        """Base URL of its management API (guest/guest)."""
        if self.management_port is None:
            raise NodeError(f"{self.name} was started without its management API")
        return f"http://127.0.0.1:{self.management_port}"

    @property
    def amqp_url(self) -> str:
        """AMQP URL of the node's default vhost."""
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    @property
    def log_file(self) -> Path:
        """The node's own log."""
        return self.base / "log" / f"{self.name}.log"

    def ctl(self, *args: str, timeout: float = CTL_TIMEOUT) -> str:
        """Run `rabbitmqctl -n NODE ARGS`; its output, or NodeError with what it said."""
        argv = [_script("rabbitmqctl"), "-q", "-n", self.name, *args]
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise NodeError(f"rabbitmqctl {' '.join(args)} took over {timeout:g}s on {self.name}") from None
        if done.returncode != 0:
            raise NodeError(
                f"rabbitmqctl {' '.join(args)} failed on {self.name} (exit {done.returncode}): "
                f"{done.stderr.strip() or done.stdout.strip()}; see {self.log_file}"
            )
        return done.stdout

    def call(self, module: str, function: str, args: str = "[]", timeout: float = CTL_TIMEOUT) -> str:
        """Call an Erlang function on the node (erl_call): what it returned, as Erlang text.

        rabbitmqctl boots an Erlang VM of its own for each command, 10 to 80 s on a loaded machine;
        erl_call answers in milliseconds, so a test can time an alarm to a moment of the crawl.
        """
        binary = str(ERL_CALL) if ERL_CALL.exists() else shutil.which("erl_call")
        if binary is None:
            raise NodeError("erl_call is not installed (Debian's erlang-base has it)")
        cookie = (self.base / ".erlang.cookie").read_text().strip()
        argv = [binary, "-sname", self.name, "-c", cookie, "-timeout", str(int(timeout))]
        argv += ["-a", f"{module} {function} {args}"]
        try:
            done = subprocess.run(argv, env=self.env, capture_output=True, text=True, timeout=timeout + 5)
        except subprocess.TimeoutExpired:
            raise NodeError(f"{module}:{function} took over {timeout:g}s on {self.name}") from None
        out = done.stdout.strip()
        if done.returncode != 0 or out.startswith("{badrpc"):
            raise NodeError(
                f"{module}:{function}{args} failed on {self.name}: {out or done.stderr.strip()}; "
                f"see {self.log_file}"
            )
        return out

    def pid(self) -> int | None:
        """The node's beam.smp process, or None once it is gone."""
        try:
            pid = int((self.base / "pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if Path(f"/proc/{pid}").exists() else None

    def accepts(self) -> bool:
        """True once the AMQP listener takes connections: it opens last, when the node has booted."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until the node serves AMQP again (after a start or start_app)."""
        deadline = time.monotonic() + timeout
        while not self.accepts():
            if time.monotonic() > deadline:
                raise NodeError(f"{self.name} not serving AMQP on :{self.port} after {timeout:g}s")
            time.sleep(0.2)

    def restart_app(self) -> float:
        """Stop and start the RabbitMQ application (as rabbitmqctl stop_app, start_app: the Erlang VM
        stays); the seconds it took."""
        started = time.monotonic()
        self.call("rabbit", "stop")
        self.call("rabbit", "start")
        self.wait_ready()
        return time.monotonic() - started

    def set_memory_watermark(self, fraction: float | None = None, absolute: int | None = None) -> None:
        """As `rabbitmqctl set_vm_memory_high_watermark`: a fraction of RAM, or `absolute` bytes."""
        if (fraction is None) == (absolute is None):
            raise ValueError("give the watermark as a fraction or as absolute bytes, not both")
        value = f"{{absolute,{absolute}}}" if absolute is not None else repr(float(fraction or 0))
        self.call("vm_memory_monitor", "set_vm_memory_high_watermark", f"[{value}]")

    def alarms(self) -> str:
        """The node's resource alarms, as Erlang text ("[]" when none)."""
        return self.call("rabbit_alarm", "get_alarms")

    def stop(self) -> None:
        """Halt the node; killed if it does not halt in time."""
        pid = self.pid()
        with contextlib.suppress(NodeError):  # it may halt before it answers
            self.call("rabbit", "stop_and_halt", timeout=60)
        deadline = time.monotonic() + 30
        while pid is not None and Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        if pid is not None and Path(f"/proc/{pid}").exists():
            os.kill(pid, signal.SIGKILL)


def node_env(
    name: str, port: int, dist_port: int, base: Path, management_port: int | None = None
) -> dict[str, str]:
    """Environment for rabbitmq-server and rabbitmqctl of the node: every path under `base`."""
    if management_port is None:
        (base / "rabbitmq.conf").write_text("")
        (base / "enabled_plugins").write_text("[].\n")
    else:
        conf = f"management.tcp.ip = 127.0.0.1\nmanagement.tcp.port = {management_port}\n"
        (base / "rabbitmq.conf").write_text(conf)
        (base / "enabled_plugins").write_text("[rabbitmq_management].\n")
    (base / "rabbitmq-env.conf").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    env.update(
        # Its own HOME: its own Erlang cookie, shared by the node and its rabbitmqctl.
        HOME=str(base),
        RABBITMQ_NODENAME=name,
        RABBITMQ_NODE_IP_ADDRESS="127.0.0.1",
        RABBITMQ_NODE_PORT=str(port),
        RABBITMQ_DIST_PORT=str(dist_port),
        RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
        RABBITMQ_LOG_BASE=str(base / "log"),
        RABBITMQ_PID_FILE=str(base / "pid"),
        # Not /etc/rabbitmq's: those name the shared node, its listener and its plugins.
        RABBITMQ_CONFIG_FILE=str(base / "rabbitmq.conf"),
        RABBITMQ_ADVANCED_CONFIG_FILE=str(base / "advanced.config"),
        RABBITMQ_CONF_ENV_FILE=str(base / "rabbitmq-env.conf"),
        RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
        RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}",
        ERL_EPMD_ADDRESS="127.0.0.1",
    )
    return env


@contextmanager
def private_node(base: Path, label: str = "crawler", management: bool = False) -> Iterator[Node]:
    """Start a fresh node with its state under `base` (and its management API, if asked); halt it
    when the block ends."""
    base.mkdir(parents=True, exist_ok=True)
    name = f"{label}-{uuid.uuid4().hex[:8]}@localhost"
    port, dist_port = _free_ports()
    api = _free_ports()[0] if management else None
    node = Node(name, port, dist_port, base, node_env(name, port, dist_port, base, api), api)
    started = subprocess.run(
        [_script("rabbitmq-server"), "-detached"],
        env=node.env,
        capture_output=True,
        text=True,
        timeout=CTL_TIMEOUT,
        check=False,
    )
    try:
        if started.returncode != 0:
            raise NodeError(f"rabbitmq-server -detached failed: {started.stderr.strip()}")
        try:
            node.wait_ready()
        except NodeError as exc:
            tail = node.log_file.read_text()[-3000:] if node.log_file.exists() else "(no log)"
            raise NodeError(f"{exc}\n{tail}") from None
        yield node
    finally:
        node.stop()
