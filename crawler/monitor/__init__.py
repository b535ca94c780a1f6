"""Monitoring: metrics, heartbeats, queue sampling, logs, progress and `crawler status`."""

from crawler.monitor.heartbeat import Heartbeat
from crawler.monitor.metrics import Metrics, Totals
from crawler.monitor.progress import Progress
from crawler.monitor.sampler import QueueSampler

__all__ = ["Heartbeat", "Metrics", "Progress", "QueueSampler", "Totals"]
