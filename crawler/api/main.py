"""`crawler-api`: serve the HTTP API with uvicorn, on loopback unless told otherwise."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import sys
from collections.abc import Sequence
from dataclasses import replace

import uvicorn

from crawler.api.app import create_app
from crawler.api.security import load_tokens
from crawler.config import load_config, with_dedup_mode
from crawler.errors import CrawlerError
from crawler.monitor import logs
from crawler.redact import redact
from crawler.settings import Settings

DEFAULT_LISTEN = "127.0.0.1:8000"
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
    parser = argparse.ArgumentParser(prog="crawler-api", description="The crawler's HTTP API (under /v1).")
    parser.add_argument(
        "--listen",
        type=listen_address,
        default=listen_address(DEFAULT_LISTEN),
        help=f"HOST:PORT to listen on (default {DEFAULT_LISTEN}: loopback only; "
        "another address exposes the API to that network, so give it explicitly)",
    )
    parser.add_argument("--config", help="domains.yaml (default: $CRAWLER_CONFIG or config/domains.yaml)")
    parser.add_argument("--log-format", choices=logs.FORMATS, default="text")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `crawler-api`."""
    args = build_parser().parse_args(argv)
    handler = logs.StderrHandler()
    handler.setFormatter(logs.formatter(args.log_format))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    try:
        tokens = load_tokens()
        settings = Settings.from_env()
        if args.config:
            settings = replace(settings, config_path=args.config)
        config = with_dedup_mode(load_config(settings.config_path), settings.dedup)
    except CrawlerError as exc:
        print(f"crawler-api: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    host, port = args.listen
    if not _is_loopback(host):
        log.warning("listening on %s: the API is reachable beyond this machine", host)
    # Only names and scopes are logged; uvicorn's access log has paths and statuses, no headers.
    log.info(
        "crawler-api on http://%s:%d/v1 with %d token(s): %s",
        host,
        port,
        len(tokens),
        ", ".join(f"{t.name} ({t.scope})" for t in tokens),
    )
    app = create_app(settings, config, tokens)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        lifespan="on",
        limit_concurrency=256,
        timeout_keep_alive=5,
        server_header=False,
    )
    return 0
