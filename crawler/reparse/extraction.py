"""Reading archived pages again, in the processes of a pool: one process per core, each with the
configuration and an event loop (for parse hooks) of its own."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from crawler.archive import read
from crawler.config import CrawlConfig
from crawler.errors import ArchiveError
from crawler.fetch.fetcher import HTML_TYPES
from crawler.parse.extract import Fields, compile_fields
from crawler.parse.reading import PageRead, read_page, read_page_now
from crawler.sink.reparsed import Target

Outcome = Literal["read", "skipped", "missing"]
RENDERED_TYPE = "text/html; charset=utf-8"  # a DOM is serialized as UTF-8


@dataclass(frozen=True, slots=True)
class Result:
    """What reading one page again found: its new reading, or why there was none."""

    target: Target
    outcome: Outcome
    read: PageRead | None = None
    note: str | None = None  # why its record could not be read


@dataclass(slots=True)
class _Process:
    config: CrawlConfig
    directory: Path
    loop: asyncio.AbstractEventLoop
    fields: dict[str, Fields] = field(default_factory=dict)


_process: _Process | None = None


def start(config: CrawlConfig, directory: str) -> None:
    """A pool process's start: its configuration, archive directory and loop."""
    global _process
    # Ctrl-C reaches the whole process group: the parent stops the run, each process its batch.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _process = _Process(config, Path(directory), asyncio.new_event_loop())


def reread(targets: Sequence[Target], links: bool = True) -> list[Result]:
    """Read `targets` again from the archive, as `start` configured this process; without `links`,
    their links are left out (not routed, they need not travel back)."""
    assert _process is not None, "start() first"
    results = [_reread(_process, target) for target in targets]
    if links:
        return results
    return [r if r.read is None else replace(r, read=replace(r.read, links=[])) for r in results]


def _reread(process: _Process, target: Target) -> Result:
    try:
        stored = read(process.directory, target.archived)
    except ArchiveError as exc:
        return Result(target, "missing", note=str(exc))
    body = stored.rendered if stored.rendered is not None else stored.body
    media = (stored.content_type or "text/html").split(";")[0].strip().lower()
    if not 200 <= stored.status < 300 or (stored.rendered is None and media not in HTML_TYPES):
        return Result(target, "skipped")  # never extracted: a redirect, an error, not HTML
    rules = process.config.rules_for(target.domain)
    fields = process.fields.get(target.domain)
    if fields is None:
        fields = process.fields[target.domain] = compile_fields(rules.extract)
    final_url = target.final_url or target.url
    content_type = RENDERED_TYPE if stored.rendered is not None else stored.content_type
    sign = target.signature is not None
    got = read_page_now(target.url, final_url, body, content_type, rules, fields, sign=sign)
    if got is None:  # a parse hook: it may be async, and has a deadline
        headers: dict[str, Any] = dict(stored.headers)
        reading = read_page(
            target.url, final_url, stored.status, headers, body, content_type, rules, fields,
            seconds=rules.timeout, sign=sign,
        )  # fmt: skip
        got = process.loop.run_until_complete(reading)
    return Result(target, "read", got)
