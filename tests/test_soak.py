"""The soak of bench/soak.py in its 3-minute form: the same checks as the 30-minute run, the ledger
(bench/ledger.py) included."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.soak import Options, run

SETTLED_FDS = 130  # descriptors of a consumer of 4 hosts with its pools full


@pytest.mark.timeout(330)  # ~30 s to boot a private RabbitMQ node, up to 4 minutes of crawl, the drain
def test_three_minutes_of_kills_and_a_broker_restart_lose_nothing_and_leak_nothing(tmp_path: Path) -> None:
    # 4 hosts x 150 pages at 2 pages/s each: 75 s of crawl at the least, however fast the machine,
    # so the survivor's slopes are fitted over a minute past its warm-up (a 50-s crawl fitted its
    # pools filling as a descriptor "leak"); ~2-3 min on a loaded machine, with a SIGKILL every 12 s
    # and the broker's restart at 30 % of the pages; the run ends when every page is stored.
    options = Options(minutes=3, kill_every=12, rate=2, pages=150, restart_at=0.3, work=tmp_path)
    report = run(options)
    print("\n" + report.text())
    o = report.outcome
    assert report.kills >= 3 and report.restarts == 1, report.notes
    assert report.completed_after is not None, report.text()
    assert (o.lost, o.duplicate_rows, o.failed_rows, o.left_in_queues) == (0, 0, 0, 0), report.text()
    # Every URL the crawl discovered (its seen-set, kept until now) is a row or waits in a queue; a
    # lost one is named with its last trace line, and the run directory is kept.
    assert o.ledger.ok and o.ledger.discovered >= o.expected, report.text()
    assert o.refetches <= report.refetch_bound, report.text()
    assert report.exits["consumer A"] == 0, report.text()
    # The consumer that lived through every kill and the restart: flat memory, no descriptor leak.
    survivor = report.survivor
    assert survivor is not None
    # Fitted over the second half: in a run this short, a loaded machine is still filling the pools
    # (a connection per host, the broker's after its restart at 30 %) past a fifth of it; a leak per
    # page or per reconnect still shows over the hundreds of pages it fetches in that half.
    rss_slope, fd_slope = survivor.slopes(warm_up=0.5)
    assert rss_slope < 5.0, report.text()
    # Its pools (a connection per host, Redis', the database's) fill for the first minutes of its
    # life: a run that ends sooner, as on a quiet machine, fits their filling as a slope. A leak
    # takes it past what a settled consumer holds (the 30-minute soak's ends at 106).
    assert fd_slope < 5.0 or survivor.points[-1][2] <= SETTLED_FDS, report.text()
