"""CPU time and memory of processes, read from /proc and from wait4's rusage."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

TICKS = os.sysconf("SC_CLK_TCK")

# Shared services, found by process name (/proc/PID/comm).
SERVICES: Mapping[str, tuple[str, ...]] = {
    "rabbitmq": ("beam.smp",),
    "redis": ("redis-server",),
    "postgres": ("postgres",),
}


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The name (field 2) is in parentheses and may hold spaces: split after its closing one.
    return text[text.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """CPU time of a live process, its reaped children included (utime+stime+cutime+cstime)."""
    fields = _stat_fields(pid)
    if fields is None:
        return 0.0
    # After the name: state is index 0, so utime/stime/cutime/cstime (fields 14-17) are 11-14.
    return sum(int(x) for x in fields[11:15]) / TICKS


def total_cpu(pids: Iterable[int]) -> float:
    """CPU time of processes: each live one's own plus what its reaped children used."""
    return sum(cpu_seconds(pid) for pid in pids)


def children_of(pid: int) -> list[int]:
    """Live direct children of a process."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None and int(fields[1]) == pid:
                out.append(int(entry.name))
    return out


def pids_named(names: Sequence[str]) -> list[int]:
    """Pids of live processes whose name is one of `names`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            comm = (entry / "comm").read_text().strip()
        except OSError:
            continue
        if comm in names:
            out.append(int(entry.name))
    return out


def _private(pid: int) -> bool:
    """Whether a process is a private instance of a service (another developer's broker started
    with its home or data under /tmp), not the shared one."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(arg.startswith(b"/tmp/") for arg in argv)


def service_cpu() -> dict[str, float]:
    """CPU seconds used so far by each shared service (all of its processes, private ones left out)."""
    return {
        kind: total_cpu(p for p in pids_named(names) if not _private(p)) for kind, names in SERVICES.items()
    }


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live thread of a process (utime+stime of /proc/PID/task/TID)."""
    out = {}
    try:
        tids = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return {}
    for tid in tids:
        try:
            text = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


def rss_mb(pid: int) -> float | None:
    """Resident memory of a live process in MB, or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


@dataclass(slots=True)
class Child:
    """A process the bench started, reaped with wait4 so its CPU time and peak RSS are exact."""

    name: str
    proc: subprocess.Popen[bytes]
    cpu: float = 0.0  # seconds, user + system, its reaped descendants included
    peak_rss_mb: float = 0.0
    rss: list[tuple[int, float]] = field(default_factory=list)  # (pages done, RSS MB) samples
    threads: dict[int, float] = field(default_factory=dict)  # thread id -> CPU seconds, last sample

    @classmethod
    def start(
        cls, name: str, argv: Sequence[str], env: Mapping[str, str], log: IO[bytes], cwd: Path | None = None
    ) -> Child:
        """Start `argv` with its output going to `log`."""
        proc = subprocess.Popen(
            list(argv), env=dict(env), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=cwd
        )
        return cls(name, proc)

    @property
    def pid(self) -> int:
        """Its process id."""
        return self.proc.pid

    @property
    def running(self) -> bool:
        """True until it has been reaped."""
        return self.proc.returncode is None

    def poll(self) -> bool:
        """Reap it if it has exited (recording its rusage); True while it still runs."""
        return self.running and not self._reap(os.WNOHANG)

    def wait(self) -> int:
        """Wait for it to exit; its exit code."""
        if self.running:
            self._reap(0)
        assert self.proc.returncode is not None
        return self.proc.returncode

    def _reap(self, flags: int) -> bool:
        pid, status, usage = os.wait4(self.pid, flags)
        if pid == 0:
            return False
        self.cpu = usage.ru_utime + usage.ru_stime
        self.peak_rss_mb = usage.ru_maxrss / 1024  # kB on Linux
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return True

    def sample(self, pages: int) -> None:
        """Record its RSS now against the pages done so far."""
        mb = rss_mb(self.pid) if self.running else None
        if mb is not None:
            self.rss.append((pages, mb))
            self.threads.update(thread_cpu(self.pid))

    def thread_split(self) -> tuple[float, float]:
        """CPU seconds of its main thread and of all its other threads, as last sampled."""
        main = self.threads.get(self.pid, 0.0)
        return main, sum(self.threads.values()) - main

    def rss_at(self, pages: int) -> float | None:
        """Its RSS at the first sample with at least `pages` done."""
        return next((mb for done, mb in self.rss if done >= pages), None)

    def kill(self) -> None:
        """Kill it if it still runs and reap it."""
        if self.running:
            self.proc.kill()
            self.wait()
