"""API keys: the one a request presents, found in constant time.

What each key was charged is kept in Redis by the pool's scripts (pool.py), which check its budget
and concurrency in the same call that reserves an exit.
"""

from __future__ import annotations

import hmac

from crawler.gateway.proxies import ApiKey


def find_key(keys: dict[str, ApiKey], presented: str) -> ApiKey | None:
    """The key whose secret is `presented`, compared in constant time; every key is compared."""
    found = None
    given = presented.encode()
    for secret, key in keys.items():
        if hmac.compare_digest(secret.encode(), given):
            found = key
    return found
