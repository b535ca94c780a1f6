"""Chromium's processes: launched so that they die with the gateway, found and measured via /proc.

Playwright runs a Node.js driver, which runs Chromium. Both are started through `setpriv
--pdeathsig KILL`, so the kernel kills the driver when the gateway dies (even by SIGKILL, when no
cleanup runs) and each browser when the driver dies; Chromium's own children exit with it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from pathlib import Path

import playwright

# Flags that work on a closed network: nothing phones home, nothing updates itself. The proxy
# catches whatever might slip past interception (a request Playwright does not route): it points
# at a port nothing serves, and `<-loopback>` sends loopback through it as well.
FLAGS = (
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--dns-prefetch-disable",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--proxy-server=http://127.0.0.1:9",
    "--proxy-bypass-list=<-loopback>",
)
NO_SANDBOX = "--no-sandbox"  # unless render.sandbox: Chromium's sandbox needs user namespaces
TICKS = os.sysconf("SC_CLK_TCK")


def _tied(target: str) -> str:
    """A shell script running `target` with its arguments, killed when its parent dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:  # util-linux is on every Debian; without it, cleanup relies on close()
        return f'#!/bin/sh\nexec {shlex.quote(target)} "$@"\n'
    return f'#!/bin/sh\nexec {shlex.quote(setpriv)} --pdeathsig KILL {shlex.quote(target)} "$@"\n'


def write_launchers(directory: Path, executable: str) -> tuple[Path, Path]:
    """(driver, browser): launchers of Playwright's Node.js and of `executable`, tied to their parent."""
    node = os.environ.get("PLAYWRIGHT_NODEJS_PATH") or str(
        Path(playwright.__file__).parent / "driver" / "node"
    )
    out = []
    for name, target in (("node", node), ("chromium", executable)):
        path = directory / name
        path.write_text(_tied(target))
        path.chmod(0o700)
        out.append(path)
    return out[0], out[1]


def is_script(path: str) -> bool:
    """True if `path` starts with `#!`: a script, which may run the browser as a child of its own."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def children(pid: int) -> list[int]:
    """The direct children of `pid` (empty if it is gone)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(c) for c in f.read().split())
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


def descendants(pid: int) -> list[int]:
    """Every process below `pid`."""
    out: list[int] = []
    todo = children(pid)
    while todo:
        child = todo.pop()
        out.append(child)
        todo.extend(children(child))
    return out


def cmdline(pid: int) -> list[str]:
    """The arguments `pid` runs with (empty if it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace").split("\0")
    except OSError:
        return []


def find_marked(root: int, marker: str) -> int | None:
    """The process below `root` started with the argument `marker` whose parent was not."""
    for pid in descendants(root):
        if marker in cmdline(pid):
            parent = _ppid(pid)
            if parent is None or marker not in cmdline(parent):
                return pid
    return None


def alive(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def tree_rss(pid: int) -> int:
    """Memory of `pid` and everything below it, in bytes: their proportional set size (PSS), so the
    pages Chromium's processes share (its binary, shared memory) count once, not once per process."""
    total = 0
    for p in (pid, *descendants(pid)):
        with contextlib.suppress(OSError, ValueError, IndexError):
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
    return total


def tree_cpu(pid: int) -> float:
    """CPU seconds (user and system) spent by `pid` and the processes below it, those that ended
    included (a reaped child's time is in its parent's cutime and cstime)."""
    total = 0
    for p in (pid, *descendants(pid)):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()
            total += sum(int(f) for f in fields[11:15])
        except (OSError, ValueError, IndexError):
            pass
    return total / TICKS
