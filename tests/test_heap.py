"""The garbage collector of a launched program: what it imported is frozen, and it collects less often
than CPython's default."""

from __future__ import annotations

import gc
import subprocess
import sys

from crawler.heap import THRESHOLDS

PROBE = """
import gc, sys
from crawler import launch
sys.modules["probe"] = type(sys)("probe")
sys.modules["probe"].main = lambda: print(gc.get_threshold(), gc.get_freeze_count()) or 0
sys.exit(launch._launch("probe:main"))
"""


def test_a_launched_program_collects_less_often_and_never_walks_what_it_imported() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    thresholds, frozen = done.stdout.rsplit(" ", 1)
    assert thresholds == str(THRESHOLDS) != str(gc.get_threshold())
    assert int(frozen) > 10_000  # the modules, their functions and classes
