"""promtool for the tests: skipped where it is missing, except in CI, where a missing one fails."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def promtool() -> str:
    """The path of promtool; skips the test without it, fails it in CI (CI=true) without it."""
    path = shutil.which("promtool")
    if path is not None:
        return path
    message = "promtool not found: install Debian's prometheus package (scripts/services --tests does)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def run(*args: str, cwd: Path | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run promtool; the result carries its output for the assertion message."""
    return subprocess.run(
        [promtool(), *args], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
