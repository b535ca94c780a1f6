"""scripts/audit, which scripts/check (and so CI) runs: pip-audit over the dependencies as installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.timeout(120)
def test_an_audit_that_reached_no_advisory_service_says_so_and_fails_when_it_must() -> None:
    # A proxy nothing serves on loopback: no advisory service can be reached, wherever this runs.
    env = dict(os.environ, CRAWLER_AUDIT_SERVICE="osv", HTTPS_PROXY="http://127.0.0.1:9", NO_PROXY="")
    env.pop("CRAWLER_AUDIT_REQUIRED", None)
    lenient = subprocess.run(["bash", "scripts/audit"], cwd=REPO, env=env, capture_output=True, text=True)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr
    assert "nothing audited" in lenient.stdout and "no advisory service answered" in lenient.stdout
    env["CRAWLER_AUDIT_REQUIRED"] = "1"
    strict = subprocess.run(["bash", "scripts/audit"], cwd=REPO, env=env, capture_output=True, text=True)
    assert strict.returncode == 1 and "nothing audited" in strict.stdout
    assert "bash scripts/audit" in (REPO / "scripts" / "check").read_text()
