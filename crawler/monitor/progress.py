"""`crawler crawl`'s progress per domain: a live table on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from crawler.monitor import readings
from crawler.monitor.metrics import Metrics, Totals
from crawler.names import LOG_FIELDS

log = logging.getLogger(__name__)

LIVE_EVERY = 0.5  # seconds between redraws of the live table
LINES_EVERY = 10.0  # seconds between progress lines in a log
RATE_WINDOW = 10.0  # seconds of history behind a rate
PROGRESS_SAMPLE_EVERY = 1.0  # seconds between queue depth samples while progress is shown


@dataclass(frozen=True, slots=True)
class Row:
    """One domain's line of progress."""

    domain: str
    done: int
    queued: int | None
    inflight: int
    rate: float  # pages per second, recently
    errors: int


class Progress:
    """Shows the progress of `domains` from `metrics` until cancelled."""

    def __init__(
        self,
        metrics: Metrics,
        domains: Sequence[str],
        *,
        stream: TextIO | None = None,
        every: float | None = None,
    ) -> None:
        self.metrics = metrics
        self.domains = list(domains)
        self.stream = stream if stream is not None else sys.stderr
        self.live = self.stream.isatty()
        self.every = every if every is not None else LIVE_EVERY if self.live else LINES_EVERY
        self._history: dict[str, deque[tuple[float, int]]] = {d: deque() for d in self.domains}

    def rows(self, now: float | None = None) -> list[Row]:
        """Each domain's progress as of now."""
        now = time.monotonic() if now is None else now
        out = []
        totals = readings.all_totals(self.metrics)
        for domain in self.domains:
            t = totals.get(domain, Totals())
            out.append(Row(domain, t.done, t.queued, t.inflight, self._rate(domain, now, t.done), t.errors))
        return out

    def _rate(self, domain: str, now: float, done: int) -> float:
        history = self._history[domain]
        history.append((now, done))
        while len(history) > 2 and now - history[1][0] >= RATE_WINDOW:
            history.popleft()
        then, before = history[0]
        return (done - before) / (now - then) if now > then else 0.0

    def table(self, rows: Sequence[Row]) -> Table:
        """The rows as a rich table."""
        table = Table(title="crawl progress", title_justify="left", expand=False)
        table.add_column("domain")
        for name in ("done", "queued", "in flight", "pages/s", "errors"):
            table.add_column(name, justify="right")
        for r in rows:
            queued = "?" if r.queued is None else str(r.queued)
            errors = f"[red]{r.errors}[/red]" if r.errors else "0"
            table.add_row(r.domain, str(r.done), queued, str(r.inflight), f"{r.rate:.1f}", errors)
        return table

    def log_lines(self, rows: Sequence[Row]) -> None:
        """The rows as log lines, one per domain."""
        for r in rows:
            queued = "?" if r.queued is None else str(r.queued)
            log.info(
                "progress %s: done=%d queued=%s in_flight=%d rate=%.1f/s errors=%d",
                r.domain,
                r.done,
                queued,
                r.inflight,
                r.rate,
                r.errors,
                extra={
                    LOG_FIELDS: {
                        "domain": r.domain,
                        "done": r.done,
                        "queued": r.queued,
                        "in_flight": r.inflight,
                        "rate": round(r.rate, 2),
                        "errors": r.errors,
                    }
                },
            )

    async def run(self) -> None:
        """Show progress until cancelled."""
        if not self.live:
            while True:
                await asyncio.sleep(self.every)
                self.log_lines(self.rows())
        console = Console(file=self.stream)
        # transient: the summary printed after the crawl is what stays on the screen.
        with Live(self.table(self.rows()), console=console, transient=True, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(self.every)
                live.update(self.table(self.rows()), refresh=True)
