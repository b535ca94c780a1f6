"""Serve the demo shops (config/domains.yaml's hosts) on loopback until interrupted."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading

from demo.site import serve, shop

HOSTS = {"shop.test": "127.0.0.11", "books.test": "127.0.0.12", "games.test": "127.0.0.13"}
PORT = 8080
PRODUCTS = 40


def main() -> None:
    """Serve until SIGTERM or Ctrl-C."""
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__)
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--products", type=int, default=PRODUCTS)
    # In a container (deploy/compose.yaml) each shop runs alone, reached by its name on the network.
    parser.add_argument("--host", choices=sorted(HOSTS), action="append", help="serve only this shop")
    parser.add_argument("--bind", help="address to serve on instead of each shop's loopback one")
    args = parser.parse_args()
    sites = [
        shop(host, args.bind or ip, args.port, args.products, [h for h in HOSTS if h != host])
        for host, ip in HOSTS.items()
        if not args.host or host in args.host
    ]
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with serve(*sites):
        print(" ".join(site.url() for site in sites), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            done.wait()


if __name__ == "__main__":
    main()
