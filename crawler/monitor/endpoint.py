"""A program's /metrics and /healthz, served from a thread, so a stuck event loop still answers (and
/healthz then reports what has gone stale)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, make_wsgi_app, start_http_server

from crawler.errors import ConfigError

Health = Callable[[], tuple[bool, str]]
"""Whether the program is healthy, and a line saying why."""

# Metrics and health are served on loopback unless --metrics-addr says otherwise: queue names, domains
# and the fleet's load are for the operator's Prometheus, which a deployment points at an address
# it chooses (deploy/ gives 0.0.0.0 inside its pods and containers).
METRICS_ADDR = "127.0.0.1"


def serve(registry: CollectorRegistry, port: int, addr: str, health: Health) -> MetricsServer:
    """Serve `registry` at /metrics and `health` at /healthz (200, else 503)."""
    try:
        server, thread = start_http_server(port, addr, registry=registry)
    except OSError as exc:
        raise ConfigError(
            f"cannot serve metrics on {addr}:{port} ({exc.strerror or exc}); choose another --metrics-port"
        ) from None
    # prometheus-client picks the address family and a quiet handler; only the app is ours.
    server.set_app(_with_healthz(make_wsgi_app(registry), health))
    return MetricsServer(server, thread)


class MetricsServer:
    """A running /metrics endpoint."""

    def __init__(self, server: Any, thread: Any) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        """The port it listens on (useful when started on port 0)."""
        port: int = self._server.server_port
        return port

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _with_healthz(app: Any, health: Health) -> Any:
    """A WSGI app answering /healthz from `health` and everything else from `app`."""

    def wrapped(environ: dict[str, Any], start_response: Any) -> Any:
        if environ.get("PATH_INFO") != "/healthz":
            return app(environ, start_response)
        ok, line = health()
        start_response(
            "200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8")]
        )
        return [f"{'ok' if ok else 'unhealthy'}: {line}\n".encode()]

    return wrapped
