"""The cyclic garbage collector set for a long-running crawler process (crawler/launch.py)."""

from __future__ import annotations

import gc

# CPython's default (700, 10, 10) runs a young collection every 700 container allocations, and a full
# one, which walks every live object, whenever the heap grows by a quarter: in a worker whose caches
# fill, 14 % of its CPU (bench/README.md). Cycles are rare in a worker's garbage; reference counting
# frees the rest at once, so collecting less often costs little memory.
THRESHOLDS = (20_000, 20, 20)


def settle() -> None:
    """Move what the program has made so far (modules, its configuration) out of the collector's
    sight, and collect less often from now on."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
