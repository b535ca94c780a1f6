"""bench.chaos in its short form: three seeded runs of random faults on private instances, each
checked as the 50-run form is (the ledger, versions and feed, politeness and attempts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import FAULTS, NEEDS_ROOT, Options, chaos
from bench.netns import unusable


@pytest.mark.timeout(900)  # ~30 s to boot the private node, then three runs of about a minute each
def test_three_runs_of_seeded_faults_lose_nothing(tmp_path: Path) -> None:
    kinds = tuple(k for k in FAULTS if unusable() is None or k not in NEEDS_ROOT)
    options = Options(runs=3, seed=20261206, pages=15, faults=4, workers=2, kinds=kinds, work=tmp_path)
    results = chaos(options)
    assert len(results) == 3
    for result in results:
        assert result.ok, result.text()
        assert result.ledger.lost == 0 and result.stored == result.expected, result.text()
        assert result.most_attempts <= 1 + 6, result.text()  # retry_delays has 6
