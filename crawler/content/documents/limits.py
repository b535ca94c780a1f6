"""How much of a document the readers take on: past any of these, it is refused (or its text cut)."""

from __future__ import annotations

from dataclasses import dataclass

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """Bounds a reader checks before it opens a document; a pool's process bounds its time and memory."""

    max_bytes: int = 64 * MiB  # the file itself
    max_pages: int = 2000  # pages of a PDF; sheets of a workbook; slides of a presentation
    max_chars: int = 2_000_000  # text kept: the rest is cut (Document.truncated)
    # An office file is a zip: its members' declared sizes together, how many there are, and how much
    # one member may inflate (a real document compresses XML 5-20 times; a zip bomb, thousands).
    max_unzipped_bytes: int = 256 * MiB
    max_members: int = 10_000
    max_ratio: int = 200
