"""The aiohttp session the gateway's requests go through the exits with."""

from __future__ import annotations

import aiohttp


def exit_session() -> aiohttp.ClientSession:
    """Bodies passed on as they came (not decompressed), no proxy from the environment, deadlines per call."""
    return aiohttp.ClientSession(
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        skip_auto_headers=("Accept-Encoding",),
        connector=aiohttp.TCPConnector(limit=0, use_dns_cache=False),
    )
