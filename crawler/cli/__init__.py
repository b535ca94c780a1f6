"""The command line: `crawler seed|crawl|crawls|domains|quality|status|reset|dead|export|history prune|
sitemaps|db upgrade`, and `crawler-consume`; a module per group of commands, their arguments as data.

Exit codes: 0 done, 1 an unexpected error (a traceback, passwords hidden), 2 bad input or a
service out of reach (one line on stderr saying which), 3 stopped at once by a second signal,
130 interrupted before work began.
"""

from crawler.cli.consume import build_consume_parser, consume_main
from crawler.cli.program import build_parser, main

__all__ = ["build_consume_parser", "build_parser", "consume_main", "main"]
