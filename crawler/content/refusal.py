"""Why a body was not made into content: the codes a refusal records with its page."""

from __future__ import annotations

from enum import StrEnum


class Refusal(StrEnum):
    """The `reason` of a ContentRefused: short, stable, fit for a column and a metric label."""

    # A document the readers refuse (DocumentRefused).
    UNSUPPORTED = "unsupported"  # no reader for this type
    TYPE_MISMATCH = "type-mismatch"  # the bytes are not what the Content-Type says
    TOO_LARGE = "too-large"  # more bytes than max_bytes
    TOO_MANY_PAGES = "too-many-pages"  # more pages (sheets, slides) than max_pages
    ZIP_BOMB = "zip-bomb"  # an office file that inflates past its limits
    ENCRYPTED = "encrypted"  # needs a password
    CORRUPT = "corrupt"  # its reader cannot make sense of it
    # A job the content pool gave up (WorkRefused).
    TIME_LIMIT = "time-limit"
    MEMORY_LIMIT = "memory-limit"
    CRASHED = "crashed"  # its process died (a signal, the kernel's OOM killer)
    FAILED = "failed"  # it raised something no reader expects: a bug, named in the message
