"""The open-files limit: raised to the hard limit at launch, since a crawl of many hosts holds a
connection (a descriptor) to each of them, and 1,024, a common default, is spent at a few thousand."""

from __future__ import annotations

import resource

# Below this a crawl of many hosts runs out of descriptors: bench.many's 2,500 domains peak at 7,700.
ENOUGH = 8192


def raise_open_files() -> int:
    """Raise this process's soft limit on open files to its hard limit; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):  # e.g. above the kernel's nr_open: keep what was given
            return soft
        return wanted
    return soft


def open_files_warning() -> str | None:
    """What to say if this process may open too few files for a crawl of many hosts; None if enough."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= ENOUGH:
        return None
    return (
        f"open files limited to {soft}: a crawl of many hosts holds a connection to "
        f"each and fails to connect past it; raise the limit to {ENOUGH} or more (`ulimit -Hn`, "
        "systemd's LimitNOFILE=, the container runtime's nofile)"
    )
