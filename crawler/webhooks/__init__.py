"""Webhooks: every version the change feed publishes, POSTed as signed JSON to the receivers of
domains.yaml's `webhooks:`, off the page path (a queue of their own), retried through the retry tiers,
then set aside as dead letters a person replays."""

from crawler.webhooks.deliverer import Deliverer, delivering
from crawler.webhooks.signing import SIGNATURE_HEADER, signature, verify

__all__ = ["SIGNATURE_HEADER", "Deliverer", "delivering", "signature", "verify"]
