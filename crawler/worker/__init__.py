"""The worker: a consumer's loop, one page's visit, and a crawl's parts wired together.

What the programs and the service use of it is named here and in crawler.worker.wiring; the rest is
the worker's own (an import contract in pyproject.toml keeps it so).
"""

from crawler.monitor.metrics import DomainStats
from crawler.worker.background import background
from crawler.worker.consumer import Consumer, Ending
from crawler.worker.page import Visit, Visitor
from crawler.worker.signals import EXIT_ABORTED
from crawler.worker.watching import Monitoring

__all__ = [
    "EXIT_ABORTED",
    "Consumer",
    "DomainStats",
    "Ending",
    "Monitoring",
    "Visit",
    "Visitor",
    "background",
]
