"""A test site whose pages change between passes: ETag and Last-Modified on each page, 304 to a
conditional request that still matches, and a log of every request with what it sent and got."""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from demo.site import free_port

_NONCE = itertools.count()


@dataclass
class Page:
    """A page's content as served now (bytes: as they are); `validators` off serves it without ETag
    and Last-Modified; with `after`, it is answered only once that path has been (up to 60 s)."""

    body: str | bytes
    modified: float = field(default_factory=time.time)
    validators: bool = True
    status: int = 200
    content_type: str = "text/html; charset=utf-8"
    after: str | None = None

    @property
    def etag(self) -> str:
        raw = self.body if isinstance(self.body, bytes) else self.body.encode()
        return '"' + hashlib.sha1(raw).hexdigest()[:16] + '"'

    @property
    def last_modified(self) -> str:
        return formatdate(self.modified, usegmt=True)


@dataclass(frozen=True)
class Hit:
    """One request: its path, the validators it sent, and the status it got."""

    path: str
    if_none_match: str | None
    if_modified_since: str | None
    status: int


@dataclass
class FreshSite:
    """One host's pages, changeable between passes, and the log of requests it served."""

    host: str
    ip: str
    port: int
    pages: dict[str, Page] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _answered: dict[str, threading.Event] = field(default_factory=dict)

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def answer(self, path: str, etag: str | None, since: str | None) -> tuple[int, Page | None]:
        """The status of a request for `path` that sent these validators, logged."""
        with self._lock:
            page = self.pages.get(path)
            status = 404 if page is None else page.status
            fresh = page is not None and (etag == page.etag or (etag is None and since == page.last_modified))
            if page is not None and page.status == 200 and page.validators and fresh:
                status = 304
            self.hits.append(Hit(path, etag, since, status))
            self._answered_event(path).set()
            return status, page

    def wait_for_answer(self, path: str, timeout: float = 60) -> None:
        """Block until `path` has been answered once (or `timeout` passed)."""
        with self._lock:
            event = self._answered_event(path)
        event.wait(timeout)

    def _answered_event(self, path: str) -> threading.Event:
        return self._answered.setdefault(path, threading.Event())

    def requests_of(self, path: str) -> list[Hit]:
        with self._lock:
            return [h for h in self.hits if h.path == path]


def html(title: str, text: str, links: list[str] = (), nonce: bool = True) -> str:  # type: ignore[assignment]
    """A page whose head and scripts change on every response (a nonce, a CSRF token), its text not."""
    anchors = "".join(f'<a href="{href}">{href}</a> ' for href in links)
    marker = "{NONCE}" if nonce else ""
    return (
        f"<!doctype html><html><head><title>{title}</title><meta name='csrf' content='{marker}'>"
        f"<script nonce='{marker}'>var t='{marker}';</script></head><body><!-- {marker} -->"
        f"<h1>{title}</h1><p class='text'>{text}</p>{anchors}</body></html>"
    )


def _handler(site: FreshSite) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            waits_for = getattr(site.pages.get(self.path), "after", None)
            if waits_for is not None:
                site.wait_for_answer(waits_for)
            status, page = site.answer(
                self.path, self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
            )
            if status == 304 or page is None:
                body = b""
            elif isinstance(page.body, bytes):
                body = page.body
            else:
                body = page.body.replace("{NONCE}", str(next(_NONCE))).encode()
            if page is None:
                body = b"<html><title>Not found</title></html>"
            self.send_response(status)
            self.send_header("Content-Type", page.content_type if page else "text/html; charset=utf-8")
            if page is not None and page.validators:
                self.send_header("ETag", page.etag)
                self.send_header("Last-Modified", page.last_modified)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def serving(site: FreshSite) -> Iterator[FreshSite]:
    """Serve `site` until the block ends."""
    server = ThreadingHTTPServer((site.ip, site.port), _handler(site))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()


def fresh_site(host: str = "a.test", ip: str = "127.0.0.21") -> FreshSite:
    """An empty site on `ip` and a free port."""
    return FreshSite(host, ip, free_port(ip))
