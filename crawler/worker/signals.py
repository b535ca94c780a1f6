"""How a consumer process ends: the first SIGTERM or SIGINT drains, a second exits at once; SIGHUP reloads."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Iterator

from crawler import stopping

log = logging.getLogger(__name__)

EXIT_ABORTED = 3  # a second signal: exit at once, unacked messages go back to their queues


@contextlib.contextmanager
def drain_on_signals(
    stop: Callable[[signal.Signals], None], reload: Callable[[], None], grace: float
) -> Iterator[None]:
    """For the block: SIGTERM/SIGINT call `stop` with the signal (a second one exits now), SIGHUP calls
    `reload`; a SIGTERM that came while the process started drains at once."""
    loop = asyncio.get_running_loop()
    received = 0

    def on_stop(sig: signal.Signals) -> None:
        nonlocal received
        received += 1
        if received > 1:
            log.warning("second %s: exiting now; unacked messages return to their queues", sig.name)
            os._exit(EXIT_ABORTED)
        log.info("%s: finishing in-flight messages (up to %.0fs); again to exit now", sig.name, grace)
        stop(sig)

    loop.add_signal_handler(signal.SIGHUP, reload)
    try:
        with stopping.handled(on_stop, (signal.SIGINT,)):
            yield
    finally:
        loop.remove_signal_handler(signal.SIGHUP)
