"""Registered domains, by the Public Suffix List bundled with publicsuffixlist (never fetched)."""

from __future__ import annotations

from functools import cache, lru_cache

from publicsuffixlist import PublicSuffixList

from crawler.names import LINKS_REMEMBERED


@cache
def _suffixes() -> PublicSuffixList:
    # The bundled snapshot, private suffixes included (each github.io site is a domain of its own).
    return PublicSuffixList()


@lru_cache(maxsize=LINKS_REMEMBERED)
def registered_domain(host: str) -> str:
    """The registered domain of a canonical host: `a.b.shop.co.uk` -> `shop.co.uk`, `a.b.test` ->
    `b.test` (an unknown TLD follows the default rule `*`); a public suffix or IP literal: itself."""
    if host.startswith("[") or host.replace(".", "").isdigit():
        return host
    return _suffixes().privatesuffix(host) or host
