"""What the programs that consume (`crawler crawl`, `crawler-consume`) share: the worker's monitoring
as the command line asks it, the summary printed once done, and how a burst ends."""

from __future__ import annotations

import argparse
import signal
import sys

from crawler.cli.running import EXIT_INTERRUPTED, EXIT_OK
from crawler.frontier.settling import AckAfter
from crawler.monitor import readings
from crawler.monitor.metrics import DomainStats, Metrics
from crawler.monitor.progress import PROGRESS_SAMPLE_EVERY
from crawler.programs import EXIT_USAGE
from crawler.redact import redact
from crawler.worker import Ending, Monitoring

_SUMMARY = (("ok", 7), ("failed", 7), ("retried", 7), ("dead", 5), ("invalid", 7), ("skipped", 7))
# A recrawl's columns: its unchanged pages counted apart, a 304 and a same signature.
_REFRESHED = (
    ("changed", "changed", 7),
    ("not_modified", "304", 7),
    ("same_signature", "same", 7),
    ("gone", "gone", 5),
)


def monitoring(args: argparse.Namespace, metrics: Metrics | None = None) -> Monitoring:
    """The worker's metrics endpoint and heartbeat as the command line says."""
    watching = Monitoring(port=args.metrics_port, addr=args.metrics_addr, heartbeat_ttl=args.heartbeat_ttl)
    if metrics is not None:
        # A progress display reads these metrics: sample queue depths often enough for it.
        watching.metrics, watching.sample_every = metrics, PROGRESS_SAMPLE_EVERY
    return watching


def summary(stats: dict[str, DomainStats], seconds: float) -> str:
    """Pages per domain and outcome, then the rate."""
    refreshed = any(getattr(s, key) for s in stats.values() for key, _, _ in _REFRESHED)
    columns = [(key, key, width) for key, width in _SUMMARY] + (list(_REFRESHED) if refreshed else [])
    lines = [f"{'domain':<24} " + " ".join(f"{title:>{width}}" for _, title, width in columns)]
    total = 0
    for domain, s in sorted(stats.items()):
        lines.append(f"{domain:<24} " + " ".join(f"{getattr(s, key):>{width}}" for key, _, width in columns))
        total += s.ok + s.failed
    rate = total / seconds if seconds > 0 else 0.0
    lines.append(f"{total} pages in {seconds:.1f}s: {rate:.1f} pages/s")
    return "\n".join(lines)


def ack_delays(metrics: Metrics) -> str:
    """How soon deliveries were acked once done: what a crash just before would have done again."""
    parts = []
    afters: dict[AckAfter, str] = {"commit": "their row's commit", "retry": "their retry copy"}
    for after, what in afters.items():
        count, p99 = readings.ack_delay_quantile(metrics, 0.99, after)
        if p99 is not None:
            parts.append(f"{count} after {what}, p99 {1000 * p99:.1f} ms")
    frames, multiple = readings.ack_frames(metrics)
    if frames:
        # Every delivery acked once done counts once among these (dead ones within failed).
        done = sum(
            s.ok + s.failed + s.retried + s.invalid + s.skipped for s in readings.summary(metrics).values()
        )
        per = f" ({frames / done:.3f} per delivery)" if done else ""
        parts.append(f"{frames} ack frames{per}, {multiple} of them multiple")
    return f"acked: {'; '.join(parts) if parts else 'none'}"


def crawl_ended(ending: Ending, crawl: str | None) -> int:
    """A burst's exit status: 0 drained; 2 if the fetch service refused a domain (said in one line);
    130 if Ctrl-C stopped it first (0 for SIGTERM, a graceful stop); what is left stays queued."""
    which = f"crawl {crawl}" if crawl else "the crawl"
    if ending.halted:
        domain, why = sorted(ending.halted.items())[0]
        more = f" (and {len(ending.halted) - 1} more domains)" if len(ending.halted) > 1 else ""
        print(
            f"crawler: error: {which} cannot fetch {domain}{more}: {redact(why)}; "
            "its messages stay queued for the next run",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if ending.stopped:
        print(
            f"{which} interrupted: what it left queued is crawled by the next `crawler crawl`",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED if ending.signal == signal.SIGINT else EXIT_OK
    return EXIT_OK
