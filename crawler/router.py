"""The router's old address, kept so `crawler.router` stays importable.

Its home is crawler/frontier/router.py (`crawler.frontier.router`): import from there in new code.
"""

from crawler.frontier.router import PublishFailed, Routed, Router, priority_for

__all__ = ["PublishFailed", "Routed", "Router", "priority_for"]
