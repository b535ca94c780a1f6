"""The crawler's exceptions: one root, a child per kind of thing that went wrong."""

from __future__ import annotations


class CrawlerError(Exception):
    """Root of every error the crawler raises on purpose; its message says what and how to fix it."""


class ConfigError(CrawlerError):
    """domains.yaml or the environment is invalid."""


class BadURL(CrawlerError):
    """A URL cannot be crawled: unparsable, not http(s), or out of scope."""


class BadHost(BadURL):
    """A host name cannot be crawled: malformed, too long, a wildcard, or an IP literal not allowed."""


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


class NoSuchHost(FetchError):
    """The host's name does not exist (NXDOMAIN) or has no address: asking again will not help."""

    transient = False


class ResolveFailed(FetchError):
    """The host's name could not be resolved now (a timeout, a failing name server): try again after
    `retry_after` seconds."""

    def __init__(self, message: str, *, retry_after: float = 0.0, url: str | None = None) -> None:
        super().__init__(message, url=url)
        self.retry_after = retry_after


class HostParked(ResolveFailed):
    """The host failed to resolve too many times in a row: nothing asks its name server again until
    `retry_after` seconds have passed."""


class FetchBackendError(FetchError):
    """The fetch service (our gateway or a paid API) failed, not the target: its own error."""


class BackendUnavailable(FetchBackendError):
    """The fetch service answered 5xx, timed out or could not be reached: try again later."""


class BackendBusy(FetchBackendError):
    """The fetch service refused for its concurrency limit (429): the backend backs off, not the domain."""


class BackendHalt(FetchBackendError):
    """The fetch service will not serve this domain until a person acts: stop taking its messages.

    `pause` is how long to stop (None: until restarted); the message goes back to its queue.
    """

    transient = True
    pause: float | None = None


class BackendDown(BackendHalt):
    """The fetch service itself keeps failing (unreachable, no answer, its own errors): the page is
    not to blame, so it goes back unspent while its domain pauses `pause` seconds; the outage has
    `lasted` seconds so far."""

    def __init__(self, message: str, *, pause: float, lasted: float, url: str | None = None) -> None:
        super().__init__(message, url=url)
        self.pause = pause
        self.lasted = lasted


class BackendKeyRejected(BackendHalt):
    """The fetch service refused the API key (401/403): fix CRAWLER_FETCH_API_KEY."""


class BackendBudgetExhausted(BackendHalt):
    """The fetch service's budget or credits are used up (402): the domain pauses (domains.yaml's
    `budget_pause`, which the consumer uses in place of this default)."""

    pause = 300.0


class SinkError(CrawlerError):
    """A write to the database failed."""


class FeedError(CrawlerError):
    """A page's new version could not be published to the change feed (not confirmed)."""


class SitemapError(CrawlerError):
    """A body read as a sitemap is none of the kinds a sitemap can be (XML, RSS, Atom, a list of URLs)."""


class ArchiveError(CrawlerError):
    """The WARC archive cannot be written, or a record it should hold cannot be read."""


class HookFailed(CrawlerError):
    """A parse hook raised, returned something unusable, or overran the page's deadline."""


class DedupLost(CrawlerError):
    """Redis lost a crawl's dedup store and it could not be rebuilt from the sink (yet)."""


class StorageError(CrawlerError):
    """Object storage (S3 or an S3-compatible store) refused or failed a request, or cannot be reached."""


class ContentRefused(CrawlerError):
    """A body was not made into content; `reason` is the short code recorded with the page.

    Reasons: crawler.content.refusal.Refusal. Raised in a pool's process and again in its caller.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason

    def __reduce__(self) -> tuple[type[ContentRefused], tuple[str, str]]:
        return type(self), (self.reason, str(self))


class DocumentRefused(ContentRefused):
    """A document was refused: encrypted, too many pages, a zip bomb, not what its type says, corrupt."""


class WorkRefused(ContentRefused):
    """The content pool gave a job up: past its time or memory limit, its process died, or it failed."""
