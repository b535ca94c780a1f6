"""A webhook receiver of the tests' own, on loopback: it records every POST (headers, body) and
answers as the test says per path: a status (or a list of them, one per request), after a delay."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True, slots=True)
class Received:
    """One POST as it arrived."""

    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    """What to answer and what came; `url(path)` is where to send it."""

    host: str = "127.0.0.41"
    port: int = 0
    # path -> the statuses to answer in turn (the last one again and again); 200 for other paths
    answers: dict[str, list[int]] = field(default_factory=dict)
    # Cleared: every answer waits until it is set again (a receiver that hangs), or 60 s.
    open: threading.Event = field(default_factory=threading.Event)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/") -> str:
        return f"http://{self.host}:{self.port}{path}"

    def on(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def answer(self, path: str) -> int:
        with self.lock:
            statuses = self.answers.get(path)
            if not statuses:
                return 200
            return statuses.pop(0) if len(statuses) > 1 else statuses[0]


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with receiver.lock:
                receiver.received.append(Received(self.path, dict(self.headers.items()), body, time.time()))
            receiver.open.wait(60)  # a slow receiver holds its answer, in its own thread
            status = receiver.answer(self.path)
            try:
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                self.close_connection = True  # the sender gave up waiting: nobody to answer

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


@contextmanager
def receiving(receiver: Receiver) -> Iterator[Receiver]:
    """Serve `receiver` until the block ends."""
    server = ThreadingHTTPServer((receiver.host, receiver.port), _handler(receiver))
    server.daemon_threads = True
    server.block_on_close = False
    receiver.open.set()
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.open.set()
        server.shutdown()
        server.server_close()
