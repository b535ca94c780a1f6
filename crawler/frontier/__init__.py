"""The frontier: every queue operation (crawler.frontier.client is its one client), crawl messages, the
exchanges and queues, routing, retries, dead letters and quotas."""

from crawler.frontier.exchanges import Topology, declare, topology, work_queues
from crawler.frontier.message import CrawlMessage
from crawler.frontier.publisher import Publisher
from crawler.frontier.quota import PageQuota
from crawler.frontier.router import PublishFailed, Routed, Router

__all__ = [
    "CrawlMessage",
    "PageQuota",
    "PublishFailed",
    "Publisher",
    "Routed",
    "Router",
    "Topology",
    "declare",
    "topology",
    "work_queues",
]
