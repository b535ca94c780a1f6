"""The exchanges' and queues' old address, kept so `crawler.exchanges` stays importable.

Their home is crawler/frontier/exchanges.py (`crawler.frontier.exchanges`): import from there in new code.
"""

from crawler.frontier.exchanges import (
    Binding,
    Exchange,
    Queue,
    Topology,
    declare,
    domain_queue,
    retry_queue,
    topology,
    work_queues,
)

__all__ = [
    "Binding",
    "Exchange",
    "Queue",
    "Topology",
    "declare",
    "domain_queue",
    "retry_queue",
    "topology",
    "work_queues",
]
