"""Reading archived pages again, in the processes of a pool: one process per core, each with the
configuration and an event loop (for parse hooks) of its own."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby
from typing import Literal

import httpx

from crawler.archive.reader import RECORD_HEADROOM
from crawler.archive.source import ArchiveSource
from crawler.config import CrawlConfig, Rules
from crawler.content.documents import DocumentLimits, is_document
from crawler.errors import ArchiveError, ContentRefused
from crawler.fetch.fetcher import HTML_TYPES, REDIRECTS
from crawler.parse.extract import Fields, compile_fields
from crawler.parse.reading import PageRead, read_page, read_page_now
from crawler.reparse.records import Answer, ArchiveFile
from crawler.sink.reparsed import PageContent, Target
from crawler.sink.sql import simhash_hex

ReadStatus = Literal["read", "skipped", "unconfigured", "missing"]
RENDERED_TYPE = "text/html; charset=utf-8"  # a DOM is serialized as UTF-8
ORPHAN_CHECK = 1.0  # seconds between a pool process's looks at whether its parent is still there


@dataclass(frozen=True, slots=True)
class Result:
    """What reading one page again found: its new reading, or why there was none."""

    target: Target
    outcome: ReadStatus
    read: PageRead | None = None
    note: str | None = None  # why its record could not be read
    content: PageContent | None = None  # with `content:` on: its content columns
    title: str | None = None  # a document's, read with its content


@dataclass(slots=True)
class _Process:
    config: CrawlConfig
    source: ArchiveSource
    loop: asyncio.AbstractEventLoop
    fields: dict[str, Fields] = field(default_factory=dict)


_process: _Process | None = None


def start(config: CrawlConfig, source: ArchiveSource) -> None:
    """A pool process's start: its configuration, where the archive is, and its loop."""
    global _process
    # Ctrl-C reaches the whole process group: the parent stops the run, each process its batch.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _process = _Process(config, source, asyncio.new_event_loop())
    threading.Thread(target=_orphaned, args=(os.getppid(),), daemon=True).start()


def _orphaned(parent: int) -> None:
    # A pool process waits on a queue it holds both ends of: a parent killed (SIGKILL, or exiting
    # at a second Ctrl-C) would leave it waiting for ever.
    while os.getppid() == parent:
        time.sleep(ORPHAN_CHECK)
    os._exit(0)


def reread(targets: Sequence[Target], links: bool = True) -> list[Result]:
    """Read `targets` again from the archive (each file opened once: give them in file and offset
    order), as `start` configured this process; without `links`, their links are left out."""
    process = _process
    assert process is not None, "start() first"
    results: list[Result] = []
    for name, grouped in groupby(targets, key=lambda t: t.archived.file):
        group = list(grouped)
        with ArchiveFile(process.source, name, [t.archived for t in group]) as file:
            results.extend(_reread(process, file, target) for target in group)
    if links:
        return results
    # Not routed: they need not travel back to the parent.
    return [r if r.read is None else replace(r, read=replace(r.read, links=[])) for r in results]


def _reread(process: _Process, file: ArchiveFile, target: Target) -> Result:
    # A record holds at most the body its domain's max_body_bytes let through, and its headers.
    limit = process.config.rules_for(target.domain).max_body_bytes + RECORD_HEADROOM
    try:
        answer = file.answer(target.archived, limit)
    except ArchiveError as exc:
        return Result(target, "missing", note=str(exc))
    stored = answer.stored
    rules = process.config.rules.get(target.domain)
    final_url = target.final_url or target.url
    if rules is not None and _document(answer, rules, final_url):
        content, title = _content(rules, stored.body, stored.content_type, final_url, document=True)
        return Result(target, "read", content=content, title=title)
    if not _page(answer):
        return Result(target, "skipped")
    if rules is None:
        return Result(target, "unconfigured")  # no extraction of its own now: its row is left alone
    fields = process.fields.get(target.domain)
    if fields is None:
        fields = process.fields[target.domain] = compile_fields(rules.extract)
    # A rendered page is read from its DOM, as the crawl read it.
    body = stored.rendered if stored.rendered is not None else stored.body
    content_type = RENDERED_TYPE if stored.rendered is not None else stored.content_type
    sign = target.signature is not None
    got = read_page_now(target.url, final_url, body, content_type, rules, fields, sign=sign)
    if got is None:  # a parse hook: it may be async, and has a deadline
        # The headers as the crawl's hook saw them: case-insensitive, repeated ones kept.
        headers = httpx.Headers(stored.headers)
        reading = read_page(
            target.url, final_url, stored.status, headers, body, content_type, rules, fields,
            seconds=rules.timeout, sign=sign,
        )  # fmt: skip
        got = process.loop.run_until_complete(reading)
    if got.error is not None:
        return Result(target, "read", got)
    content, _ = _content(rules, body, content_type, final_url, document=False)
    return Result(target, "read", got, content=content)


def _document(answer: Answer, rules: Rules, url: str) -> bool:
    """Whether the crawl would read this answer of `url` as a document: `content:` on, a whole body
    of a document's type (or a generic type and a document's extension), not an error."""
    stored = answer.stored
    return (
        rules.content is not None
        and stored.status < 300
        and stored.rendered is None
        and not answer.truncated
        and is_document(stored.content_type, url)
    )


def _content(
    rules: Rules, body: bytes, content_type: str | None, url: str, *, document: bool
) -> tuple[PageContent | None, str | None]:
    """The content columns of a page (or document), as a crawl with the domain's `content:` makes
    them, and a document's title; (None, None) when there are none to make."""
    wanted = rules.content
    if wanted is None or not (document or wanted.main):
        return None, None
    from crawler.content import jobs  # the content libraries: a reparse without content never loads them

    found: jobs.Content | None
    try:
        if document:
            found = jobs.document_content(body, content_type, url, DocumentLimits())
        else:
            found = jobs.html_content(body, url, wanted.favor)
    except ContentRefused as refused:
        return PageContent(content_refused=str(refused.reason)), None
    if found is None:
        return PageContent(), None
    markdown, text = found.kept(wanted.formats)
    lang = found.lang.code if found.lang is not None else None
    return PageContent(markdown, text, lang, simhash_hex(found.simhash)), found.title


def _page(answer: Answer) -> bool:
    """Whether the crawl extracted this answer: not an error nor a redirect, and HTML it read (or
    the DOM a browser made of it)."""
    stored = answer.stored
    if stored.status >= 400:
        return False
    if stored.status in REDIRECTS and any(n.lower() == "location" and v.strip() for n, v in stored.headers):
        return False
    if stored.rendered is not None:
        return True
    media = (stored.content_type or "text/html").split(";")[0].strip().lower()
    return not answer.truncated and media in HTML_TYPES
