"""Chromium for the renderer's tests: skipped where it is missing, except in CI, where it fails."""

from __future__ import annotations

import os

import pytest

CHROMIUM = "/usr/lib/chromium/chromium-headless-shell"


def chromium() -> str:
    """The path of Debian's headless Chromium; skips the test without it, fails it in CI (CI=true)."""
    if os.access(CHROMIUM, os.X_OK):
        return CHROMIUM
    message = (
        "chromium not found: install Debian's chromium-headless-shell package (scripts/services --tests does)"
    )
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)
