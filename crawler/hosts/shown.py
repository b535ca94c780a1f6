"""Many domains in one line: the first few and how many more, so a list of 50,000 stays a line."""

from __future__ import annotations

from collections.abc import Iterable


def shown(domains: Iterable[str], most: int = 10, sep: str = ", ") -> str:
    """`domains` for a message or a cell: every one if at most `most`, else the first `most` and
    how many more."""
    listed = list(domains)
    if len(listed) <= most:
        return sep.join(listed)
    return f"{sep.join(listed[:most])} and {len(listed) - most:,} more"
