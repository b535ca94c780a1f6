"""`crawler-gateway --listen HOST:PORT --proxies config/proxies.yaml`.

Exit codes: 0 stopped, 2 a bad proxies.yaml, environment or listen address (one line saying which).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from aiohttp import web

from crawler import connections, stopping
from crawler.errors import ConfigError, CrawlerError
from crawler.gateway.server import Gateway
from crawler.monitor import logs
from crawler.programs import EXIT_USAGE, Parser
from crawler.redact import redact
from crawler.settings import Settings

ready = logging.getLogger("crawler.gateway.ready")  # its one line is logged whatever --verbose says


def _listen(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r}: write HOST:PORT, e.g. 127.0.0.1:8900")
    return host.strip("[]"), int(port)


async def serve(settings: Settings, proxies: str, host: str, port: int) -> None:
    """Serve the gateway until SIGTERM or SIGINT."""
    async with connections.redis(settings.redis_url) as redis:
        gateway = Gateway(redis, settings.names, proxies)
        runner = web.AppRunner(gateway.app(), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port, reuse_address=True)
            try:
                await site.start()
            except OSError as exc:
                raise ConfigError(f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
            ready.info(
                "crawler-gateway ready on http://%s:%d/fetch (%d exits)",
                host,
                port,
                len(gateway.config.exits),
            )
            stop = asyncio.Event()
            with stopping.handled(lambda _: stop.set(), (signal.SIGINT,)):
                await stop.wait()
        finally:
            await runner.cleanup()


def build_parser() -> argparse.ArgumentParser:
    """crawler-gateway's arguments (apart from main so deploy/ tests parse the manifests' commands)."""
    parser = Parser(prog="crawler-gateway", description="The crawler's fetch service", version=True)
    parser.add_argument("--listen", type=_listen, default=("127.0.0.1", 8900), help="HOST:PORT to serve on")
    parser.add_argument(
        "--proxies", default=os.environ.get("CRAWLER_PROXIES", "config/proxies.yaml"), help="the proxies.yaml"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log every ban and reload")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run crawler-gateway."""
    args = build_parser().parse_args(argv)
    handler = logs.StderrHandler()
    handler.setFormatter(logs.formatter("text"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.WARNING)
    logging.getLogger("crawler").setLevel(logging.INFO if args.verbose else logging.WARNING)
    ready.setLevel(logging.INFO)
    host, port = args.listen
    try:
        settings = Settings.from_env()
        with asyncio.Runner() as runner:  # a SIGTERM while it starts ends it cleanly, as one after
            stopping.run(runner, lambda: serve(settings, args.proxies, host, port))
    except CrawlerError as exc:
        print(f"crawler-gateway: error: {redact(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    return 0
