"""The worker: a consumer's loop, one page's visit, and a crawl's parts wired together."""

from crawler.monitor.metrics import DomainStats
from crawler.worker.consumer import Consumer
from crawler.worker.page import Visit, Visitor
from crawler.worker.watching import Monitoring

__all__ = ["Consumer", "DomainStats", "Monitoring", "Visit", "Visitor"]
