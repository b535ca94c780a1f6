"""The crawler's exceptions: one root, a child per kind of thing that went wrong."""

from __future__ import annotations


class CrawlerError(Exception):
    """Root of every error the crawler raises on purpose; its message says what and how to fix it."""


class ConfigError(CrawlerError):
    """domains.yaml or the environment is invalid."""


class BadURL(CrawlerError):
    """A URL cannot be crawled: unparsable, not http(s), or out of scope."""


class ServiceUnavailable(CrawlerError):
    """RabbitMQ, Redis or the database cannot be reached."""


class Cancelled(CrawlerError):
    """The crawl a message belongs to was cancelled: it is acked, not fetched."""


class NotFound(CrawlerError):
    """No such crawl (or other named thing): it never existed, or was deleted."""


class Conflict(CrawlerError):
    """The request contradicts the state of what it names (e.g. an id already taken)."""


class InvalidMessage(CrawlerError):
    """A queue message is not a valid crawl message."""


class FetchError(CrawlerError):
    """A fetch failed; `transient` says whether trying again later may succeed.

    `url` is the hop at which it failed (a redirect target, or the URL itself), once known.
    """

    transient: bool = True

    def __init__(self, message: str, *, status_code: int | None = None, url: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.url = url


class FetchTimeout(FetchError):
    """The whole-fetch deadline passed."""


class ConnectFailed(FetchError):
    """No connection could be made, or it broke mid-response."""


class TooLarge(FetchError):
    """The body exceeded max_body_bytes."""

    transient = False


class TooManyRedirects(FetchError):
    """The redirect chain was too long or looped."""

    transient = False


class BadResponse(FetchError):
    """The response cannot be used: an unsupported or corrupt Content-Encoding."""

    transient = False


class Refused(FetchError):
    """The target was refused before connecting (scope, scheme, private network)."""

    transient = False


class SinkError(CrawlerError):
    """A write to the database failed."""
