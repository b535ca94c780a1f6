"""`crawler-api`: serve the HTTP API with uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import signal
import socket
import sys
from collections.abc import Sequence
from dataclasses import replace

import uvicorn

from crawler import stopping
from crawler.api.app import create_app
from crawler.api.security import Token, load_tokens
from crawler.config import CrawlConfig, load_effective
from crawler.errors import ConfigError, CrawlerError
from crawler.monitor import logs
from crawler.programs import EXIT_USAGE, Parser, loop_factory
from crawler.redact import redact
from crawler.service import Control
from crawler.settings import Settings

DEFAULT_LISTEN = "127.0.0.1:8000"
BACKLOG = 2048  # uvicorn's own default
log = logging.getLogger("crawler.api")


def listen_address(value: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) as (host, port); argparse's error if malformed."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT (e.g. {DEFAULT_LISTEN})")
    return host, int(port)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def build_parser() -> argparse.ArgumentParser:
    """crawler-api's arguments (apart from main so deploy/ tests parse the manifests' commands)."""
    parser = Parser(prog="crawler-api", description="The crawler's HTTP API (under /v1).", version=True)
    parser.add_argument(
        "--listen",
        type=listen_address,
        default=listen_address(DEFAULT_LISTEN),
        help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN}: loopback only; "
        "another address exposes the API to that network, so give it explicitly)",
    )
    parser.add_argument("--config", help="domains.yaml (default: $CRAWLER_CONFIG or config/domains.yaml)")
    parser.add_argument("--log-format", choices=logs.FORMATS, default="text")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also log each request (the console polls every 3 s)"
    )
    return parser


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port, bound before anything connects, so a taken port is said first."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise ConfigError(f"--listen {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): choose another --listen"
        ) from None
    return sock


async def serve(
    settings: Settings, config: CrawlConfig, tokens: list[Token], sock: socket.socket, base: str
) -> None:
    """Connect to the services, then serve the API on `sock` until SIGTERM or SIGINT."""
    async with Control.open(settings, config, "crawler-api") as control:
        app = create_app(settings, config, tokens, control=control)
        server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_config=None,
                lifespan="on",
                limit_concurrency=256,
                timeout_keep_alive=5,
                server_header=False,
            )
        )
        # Only names and scopes are logged; uvicorn's access log has paths and statuses, no headers.
        who = ", ".join(f"{t.name} ({t.scope})" for t in tokens)
        log.info(
            "crawler-api ready: console %s/, API %s/v1 (schema %s/openapi.json), %d token(s): %s",
            base,
            base,
            base,
            len(tokens),
            who,
        )
        # uvicorn takes SIGTERM itself while it serves, and raises it again once it has stopped.
        with stopping.handled(lambda _: setattr(server, "should_exit", True), (signal.SIGINT,)):
            await server.serve(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler-api`."""
    args = build_parser().parse_args(argv)
    logs.setup(args.verbose, args.log_format, quiet=False)
    # uvicorn's own start-up lines would repeat the ready line above; its warnings and errors stay.
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    # A line per request is one every 3 s for each open console: only when asked.
    logging.getLogger("uvicorn.access").setLevel(logging.INFO if args.verbose else logging.WARNING)
    host, port = args.listen
    try:
        tokens = load_tokens()
        settings = Settings.from_env()
        if args.config:
            settings = replace(settings, config_path=args.config)
        config = load_effective(settings)
        sock = _bind(host, port)
        if not _is_loopback(host):
            log.warning("listening on %s: the API is reachable beyond this machine", host)
        base = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        with sock, asyncio.Runner(loop_factory=loop_factory()) as runner:
            stopping.run(runner, lambda: serve(settings, config, tokens, sock, base))
    except CrawlerError as exc:
        print(f"crawler-api: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return 0
