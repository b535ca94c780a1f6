"""The aiohttp session the gateway's requests go through the exits with."""

from __future__ import annotations

import ssl

import aiohttp


def exit_session(ca_file: str | None = None) -> aiohttp.ClientSession:
    """Bodies passed on as they came (not decompressed), no proxy from the environment, deadlines per
    call, and no cookie jar: a cookie one key's request was given must never go out with another's.
    `ca_file` adds certificates trusted for https targets to the system's."""
    context = ssl.create_default_context()
    if ca_file is not None:
        context.load_verify_locations(cafile=ca_file)
    return aiohttp.ClientSession(
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None),
        trust_env=False,
        skip_auto_headers=("Accept-Encoding",),
        cookie_jar=aiohttp.DummyCookieJar(),
        connector=aiohttp.TCPConnector(limit=0, use_dns_cache=False, ssl=context),
    )
