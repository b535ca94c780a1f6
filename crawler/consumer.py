"""The consumer's old address, kept so `crawler.consumer` stays importable.

Its home is crawler/worker/consumer.py (`crawler.worker.consumer`): import from there in new code,
and patch its module constants there (this module only re-exports names).
"""

from crawler.worker.consumer import Consumer, DomainStats

__all__ = ["Consumer", "DomainStats"]
