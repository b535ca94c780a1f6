"""A document's text as its reader finds it, piece by piece, kept up to a number of characters."""

from __future__ import annotations


class TextSink:
    """Collects the pieces of a document's text in order; stops taking them at `max_chars`."""

    def __init__(self, max_chars: int) -> None:
        self._parts: list[str] = []
        self._left = max_chars
        self.truncated = False

    @property
    def full(self) -> bool:
        """True once the limit is reached: the reader may stop reading."""
        return self.truncated

    def add(self, piece: str | None) -> None:
        """Append one paragraph, cell row or page's text (blank ones are skipped)."""
        piece = (piece or "").strip()
        if not piece or self.truncated:
            return
        if len(piece) > self._left:
            piece = piece[: self._left]
            self.truncated = True
        self._parts.append(piece)
        self._left -= len(piece) + 1
        if self._left <= 0:
            self.truncated = True

    def text(self) -> str:
        """The text so far, one piece a line."""
        return "\n".join(self._parts)


MAX_TITLE = 1000


def clean_title(title: object) -> str | None:
    """A document's title from its metadata, on one line; None if it has none."""
    if title is None:
        return None
    text = " ".join(str(title).split())[:MAX_TITLE]
    return text or None
