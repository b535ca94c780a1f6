"""The cyclic garbage collector set for a long-running crawler process (crawler/launch.py)."""

from __future__ import annotations

import gc

# CPython's default (700, 10, 10) collects the young objects at every 700 more, and walks every live
# object each time the old ones grew by a quarter: about 17 % of a busy worker's CPU. At (20000, 20, 20)
# a worker at 100,000 hosts held 22 % more memory; (5000, 10, 10) kept most of the CPU saved, for 8 %
# more memory (bench/README.md).
THRESHOLDS = (5_000, 10, 10)


def settle() -> None:
    """Move what the program has made so far (the modules it imported) out of the collector's sight,
    and collect less often from now on."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
