"""Log lines for people (text) and for log shippers (JSON, one object per line), passwords redacted.

A page's outcome is one line with its fields (outcome, url, domain, status, duration, attempt, ...):
in text they are part of the message, in JSON they are also keys of their own.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from crawler.names import LOG_FIELDS, TRACE_LOGGER
from crawler.redact import RedactingFormatter, redact

FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message and the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        fields = getattr(record, LOG_FIELDS, None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                data.setdefault(str(key), redact(value) if isinstance(value, str) else value)
        if record.exc_info:
            data["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(data, ensure_ascii=False, default=str)


def formatter(fmt: str) -> logging.Formatter:
    """The formatter of a --log-format: "text" or "json"."""
    # Redacting the formatted line covers arguments and tracebacks, whoever logs them.
    if fmt == "json":
        return RedactingJsonFormatter()
    if fmt == "text":
        return RedactingFormatter(TEXT_FORMAT)
    raise ValueError(f"unknown log format {fmt!r} (choose from {', '.join(FORMATS)})")


class RedactingJsonFormatter(JsonFormatter):
    """JSON lines with every password hidden, tracebacks included."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one redacted JSON object."""
        return redact(super().format(record))


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever sys.stderr is at the time, so a live display that wraps it stays intact."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record to the current sys.stderr."""
        self.stream = sys.stderr
        super().emit(record)


class _QuietReconnects(logging.Filter):
    # Passwords are the formatters' to hide (formatter() redacts every whole line).
    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.startswith(("aiormq", "aio_pika")):
            # A dropped broker connection is expected and recovered from: one line, not a traceback.
            record.exc_info = None
            record.exc_text = None
        return True


def setup(verbose: bool, fmt: str = "text", quiet: bool = True, trace: bool = False) -> None:
    """Logging of a program: to stderr in `fmt`, the crawler's own lines at INFO, libraries' only when
    `verbose`; `quiet` keeps the root at WARNING unless `verbose` (a server logs its requests at INFO);
    `trace`: each URL's way too (TRACE_LOGGER)."""
    handler = StderrHandler()
    handler.addFilter(_QuietReconnects())
    handler.setFormatter(formatter(fmt))
    logging.captureWarnings(True)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO if verbose or not quiet else logging.WARNING)
    logging.getLogger("crawler").setLevel(logging.INFO)
    # aio-pika says when the broker connection drops and comes back; aiormq repeats it louder, and
    # says a failed first connect before the program does, in words of its own.
    logging.getLogger("aiormq").setLevel(logging.INFO if verbose else logging.CRITICAL)
    logging.getLogger("aio_pika").setLevel(logging.INFO if verbose else logging.WARNING)
    # Alembic's INFO lines (its context, each migration's name) are its own debugging: never ours.
    logging.getLogger("alembic").setLevel(logging.WARNING)
    # A line per page is a lot: only when asked.
    logging.getLogger("crawler.pages").setLevel(logging.INFO if verbose else logging.WARNING)
    logging.getLogger(TRACE_LOGGER).setLevel(logging.DEBUG if trace else logging.WARNING)


def outcome(
    logger: logging.Logger,
    what: str,
    *,
    url: str,
    domain: str,
    status: int | None,
    seconds: float,
    attempt: int,
    level: int = logging.INFO,
    **more: Any,
) -> None:
    """Log one page's outcome ("ok", "failed", "retry", "dead", "invalid") as one line."""
    if not logger.isEnabledFor(level):
        return
    fields: dict[str, Any] = {
        "outcome": what,
        "url": url,
        "domain": domain,
        "status": status,
        "duration": round(seconds, 4),
        "attempt": attempt,
        **more,
    }
    tail = "".join(f" {k}={v}" for k, v in more.items() if v is not None)
    logger.log(
        level,
        "%s %s %s %s %.3fs attempt=%d%s",
        what,
        domain,
        status if status is not None else "-",
        url,
        seconds,
        attempt,
        tail,
        extra={LOG_FIELDS: fields},
    )
