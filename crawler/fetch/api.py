"""`fetch: api`: pages fetched through a fetch service (crawler-gateway, or a paid scraping API).

The worker stays a stateless requester: the service owns every IP decision. Its own errors are kept
apart from the target's: a rejected key or an exhausted budget halts the domain (BackendHalt), a
concurrency refusal backs off this backend (not the domain's rate), 5xx and silence are transient.
Endpoint and key come from the environment only, and the key never appears in a message or log.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlencode

import aiohttp
import httpx

from crawler.config import CrawlConfig, FetchSpec, Rules
from crawler.errors import (
    BackendBudgetExhausted,
    BackendKeyRejected,
    BackendUnavailable,
    BadResponse,
    ConfigError,
    ConnectFailed,
    FetchBackendError,
    FetchError,
    FetchTimeout,
    Refused,
    TooLarge,
)
from crawler.fetch.fetcher import (
    Fetcher,
    Headers,
    Response,
    Streamed,
    body_pieces,
    read_body,
    request_headers,
    slices,
    streamed,
)
from crawler.fetch.service_health import ServiceHealth
from crawler.fetch.wire import going

Profile = Literal["envelope", "scrapingbee"]
ENV_URL = "CRAWLER_FETCH_API_URL"
ENV_KEY = "CRAWLER_FETCH_API_KEY"
# The service gets the domain's deadline for the target; the worker waits this much longer for
# the service's answer, so a target's timeout arrives as the target's, not as the service's silence.
ANSWER_MARGIN = 2.0
ENVELOPE_OVERHEAD = 256 * 1024  # JSON, headers and base64 on top of max_body_bytes
# The largest body crawler-gateway puts in an envelope (or renders): it holds those whole.
ENVELOPE_MOST_BODY = 10_000_000
# The largest body crawler-gateway passes on as it comes (its raw form, never held whole), and so the
# most a worker asks it for when it streams a body (a sitemap): sitemaps.org's 50 MiB, and the read
# past them that tells a longer file is cut. Both programs read it here (docs/gateway.md).
STREAM_MOST_BODY = 52 * 1024 * 1024
GATEWAY_ERROR = "Gateway-Error"  # the header marking crawler-gateway's own answers, and its failures

log = logging.getLogger(__name__)

# The envelope's error kinds for a target that could not be fetched, as the worker's own errors.
_TARGET_ERRORS: dict[str, type[FetchError]] = {
    "timeout": FetchTimeout,
    "connect": ConnectFailed,
    "too_large": TooLarge,
    "bad_response": BadResponse,
    "refused": Refused,
}


@dataclass(frozen=True, slots=True)
class ApiEndpoint:
    """Where the fetch service is and the key it takes; from the environment, never domains.yaml."""

    url: str
    key: str = ""

    def __repr__(self) -> str:  # the key must not reach a log through a repr
        return f"ApiEndpoint(url={self.url!r}, key={'***' if self.key else ''!r})"

    @classmethod
    def checked(cls, url: str | None, key: str) -> ApiEndpoint:
        """The endpoint at `url` (Settings.fetch_api_url); ConfigError if it is missing or not http(s)."""
        url = (url or "").strip()
        if not url.startswith(("http://", "https://")):
            raise ConfigError(
                f"domains.yaml sends pages through `fetch: api`, but {ENV_URL} is "
                f"{'not an http(s) URL' if url else 'not set'}; set it to the fetch service "
                "(e.g. http://127.0.0.1:8900/fetch for crawler-gateway)"
            )
        return cls(url, key)


def _flag(value: bool) -> str:
    return "true" if value else "false"


class ApiFetcher:
    """Fetches through a fetch service speaking `profile`; one request per fetch, as every backend."""

    def __init__(self, config: CrawlConfig, endpoint: ApiEndpoint, *, max_connections: int = 100) -> None:
        self._endpoint = endpoint
        self._profile: Profile = config.api_profile
        self._user_agent = request_headers(config)["User-Agent"]
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=max_connections),
            auto_decompress=False,  # read_body decodes, bounded
            timeout=aiohttp.ClientTimeout(total=None),
            trust_env=False,
        )
        self._health = ServiceHealth()

    @property
    def backend(self) -> str:
        """The name credits are counted under (crawler_credits_used_total{backend})."""
        return "gateway" if self._profile == "envelope" else self._profile

    async def fetch(
        self, url: str, rules: Rules, *, html_only: bool = True, headers: Headers | None = None
    ) -> Response:
        """One request for `url` through the service, within the domain's deadline and body limit.

        `headers` are not sent: a fetch service takes no request headers of its caller's, so a
        refresh through it is told unchanged by its content's signature, never by a 304.
        """
        spec = rules.fetch_for(url)
        await going()  # the service sends it on at once (its exits' own pacing is its own)
        async with self._health.asking(url, rules.timeout + ANSWER_MARGIN, streaming=False):
            if self._profile == "scrapingbee":
                response = await self._scrapingbee(url, spec, rules, html_only)
            else:
                response = await self._envelope(url, spec, rules, html_only)
        if html_only and not response.is_html:
            return Response(
                response.url,
                response.final_url,
                response.status_code,
                response.headers,
                b"",
                response.credits,
                response.exit_id,
            )
        return response

    @asynccontextmanager
    async def stream(
        self, url: str, rules: Rules, *, headers: Headers | None = None
    ) -> AsyncIterator[Streamed]:
        """`url`'s answer with its body as it comes: crawler-gateway passes it on (its raw form) within
        STREAM_MOST_BODY; a paid API's, or a rendered page, is read whole first. `headers` are not sent."""
        spec = rules.fetch_for(url)
        if self._profile != "envelope" or spec.render_js:
            response = await self.fetch(url, rules, html_only=False, headers=headers)
            yield Streamed(response.url, response.status_code, response.headers, slices(response.body))
            return
        deadline = rules.timeout + ANSWER_MARGIN
        await going()
        async with self._health.asking(url, deadline, streaming=True), self._raw(url, spec, rules) as answer:
            yield answer

    @asynccontextmanager
    async def _raw(self, url: str, spec: FetchSpec, rules: Rules) -> AsyncIterator[Streamed]:
        """crawler-gateway's raw form of `url`'s answer: the target's own status, headers and body."""
        limit = min(rules.max_body_bytes, STREAM_MOST_BODY)
        params: dict[str, str] = {
            "url": url,
            "premium_proxy": _flag(spec.premium),
            "follow_redirects": "false",
            "html_only": "false",
            "timeout": f"{rules.timeout:g}",
            "max_body_bytes": str(limit),
        }
        if spec.country:
            params["country_code"] = spec.country.upper()
        if spec.session:
            params["session"] = spec.session
        asked = {"X-API-Key": self._endpoint.key, "User-Agent": self._user_agent}
        target = f"{self._endpoint.url}?{urlencode(params)}"
        async with self._session.get(target, headers=asked, allow_redirects=False) as resp:
            kind = resp.headers.get(GATEWAY_ERROR)
            if kind is not None:  # the gateway's own answer, or the target's failure it reports
                message = _message(await resp.content.read(4096))
                failed = _TARGET_ERRORS.get(kind)
                if failed is not None:
                    raise failed(f"{message} (through the fetch service)")
                raise self._service_error(resp.status, message)
            answered = httpx.Headers(
                [(k, v) for k, v in resp.headers.items() if not k.lower().startswith("gateway-")]
            )
            encodings = resp.headers.getall("Content-Encoding", [])
            pieces = body_pieces(resp.content.iter_any(), encodings, limit, resp.status)
            yield Streamed(url, resp.status, answered, pieces)

    async def aclose(self) -> None:
        """Close the session and its connections."""
        await self._session.close()

    async def check_renders(self, config: CrawlConfig) -> None:
        """ConfigError if domains.yaml asks for rendered pages and crawler-gateway has no renderer.

        Asked once at start (its /healthz says); a service that does not answer is not held against
        the crawl here: its pages fail and are retried like any other outage.
        """
        rendering = sorted(d for d, r in config.rules.items() if r.renders)
        if config.defaults.renders:
            rendering.insert(0, "defaults")
        if not rendering or self._profile != "envelope":
            return  # a paid API's render_js is its own business: it answers for it per request
        health = self._endpoint.url.rstrip("/").removesuffix("/fetch") + "/healthz"
        try:
            async with asyncio.timeout(10):
                async with self._session.get(health, allow_redirects=False) as resp:
                    answer = json.loads(await resp.read())
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            log.warning("cannot ask %s whether it renders pages (%s): going on", health, exc)
            return
        if not (isinstance(answer, dict) and isinstance(answer.get("render"), dict)):
            raise ConfigError(
                f"domains.yaml asks for rendered pages (render_js in {', '.join(rendering)}), but the "
                f"fetch service at {self._endpoint.url} has no renderer: add a `render:` section to its "
                'proxies.yaml (docs/gateway.md, "Rendering pages"), or drop render_js'
            )

    # -- our envelope (crawler-gateway) -----------------------------------------------------------

    async def _envelope(self, url: str, spec: FetchSpec, rules: Rules, html_only: bool) -> Response:
        params: dict[str, str] = {
            "url": url,
            "render_js": _flag(spec.render_js),
            "premium_proxy": _flag(spec.premium),
            "json_response": "true",  # crawler-gateway's default is the target's raw answer
            "follow_redirects": "false",
            "html_only": _flag(html_only),
            "timeout": f"{rules.timeout:g}",
            "max_body_bytes": str(min(rules.max_body_bytes, ENVELOPE_MOST_BODY)),
        }
        if spec.country:
            params["country_code"] = spec.country.upper()
        if spec.session:
            params["session"] = spec.session
        if spec.render_js:
            if rules.archive:  # the archive keeps the page as the site sent it, beside its DOM
                params["return_document"] = "true"
            params["wait_until"] = spec.wait_until
            if spec.wait_for:
                params["wait_for"] = spec.wait_for
        headers = {"X-API-Key": self._endpoint.key, "User-Agent": self._user_agent}
        target = f"{self._endpoint.url}?{urlencode(params)}"
        async with self._session.get(target, headers=headers, allow_redirects=False) as resp:
            limit = rules.max_body_bytes * 4 // 3 + ENVELOPE_OVERHEAD
            raw = await read_body(
                resp.content.iter_any(), resp.headers.getall("Content-Encoding", []), limit, resp.status
            )
            if resp.status != 200:
                raise self._service_error(resp.status, _message(raw))
        try:
            answer = json.loads(raw)
        except ValueError:
            raise BackendUnavailable("the fetch service's answer is not JSON") from None
        if not isinstance(answer, dict):
            raise BackendUnavailable("the fetch service's answer is not a JSON object")
        return _from_envelope(url, answer, rules)

    def _service_error(self, status: int, message: str) -> FetchBackendError:
        """The worker's error for the service's own (non-200) answer."""
        text = f"fetch service answered {status}: {message[:300]}"
        if status in (401, 403):
            return BackendKeyRejected(f"{text}; check {ENV_KEY}")
        if status == 402:
            return BackendBudgetExhausted(text)
        if status == 429:
            return self._health.busy(text)
        if status >= 500:
            return BackendUnavailable(text)
        bad = BackendUnavailable(text)
        bad.transient = False  # our request was malformed or refused: trying again will not help
        return bad

    # -- ScrapingBee's conventions ----------------------------------------------------------------

    async def _scrapingbee(self, url: str, spec: FetchSpec, rules: Rules, html_only: bool) -> Response:
        # ScrapingBee takes the key as a query parameter; this URL is never logged.
        params: dict[str, str] = {
            "api_key": self._endpoint.key,
            "url": url,
            "render_js": _flag(spec.render_js),  # its default is true (5 credits): always say
            "premium_proxy": _flag(spec.premium),
            "transparent_status_code": "true",  # the target's status, not 500 for its 4xx/5xx
            "timeout": str(int(rules.timeout * 1000)),
        }
        if spec.country:
            params["country_code"] = spec.country.lower()
        if spec.session:
            # session_id is an integer there: a stable number from our session name.
            params["session_id"] = str(int.from_bytes(spec.session.encode()[:6].ljust(6, b"\0")) % 10_000_000)
        target = f"{self._endpoint.url}?{urlencode(params)}"
        async with self._session.get(target, allow_redirects=False) as resp:
            raw = await read_body(
                resp.content.iter_any(),
                resp.headers.getall("Content-Encoding", []),
                rules.max_body_bytes,
                resp.status,
            )
            # The service's own errors carry none of its Spb- answer headers.
            resolved = resp.headers.get("Spb-resolved-url")
            if resolved is None:
                message = _message(raw)
                if resp.status == 401 and "credit" in message.lower():
                    raise BackendBudgetExhausted(f"ScrapingBee answered 401: {message[:300]}")
                raise self._service_error(resp.status, message)
            cost = _number(resp.headers.get("Spb-cost"))
            headers = httpx.Headers(
                [
                    (k[4:], v)
                    for k, v in resp.headers.items()
                    if k.lower().startswith("spb-")
                    and k.lower() not in ("spb-cost", "spb-resolved-url", "spb-initial-status-code")
                ]
                or [("content-type", resp.headers.get("Content-Type", "text/html"))]
            )
            if "content-type" not in headers:
                headers["content-type"] = resp.headers.get("Content-Type", "text/html")
            return Response(url, resolved, resp.status, headers, raw, cost, None)


def _from_envelope(url: str, answer: dict[str, Any], rules: Rules) -> Response:
    """The Response an envelope carries, or the target's FetchError it reports."""
    credits = _number(answer.get("credits_used"))
    exit_id = answer.get("exit") if isinstance(answer.get("exit"), str) else None
    error = answer.get("error")
    if isinstance(error, dict):
        kind = str(error.get("kind", ""))
        cls = _TARGET_ERRORS.get(kind, ConnectFailed)
        status = answer.get("status_code")
        raise cls(
            f"{error.get('message', kind)} (through the fetch service)",
            status_code=status if isinstance(status, int) else None,
        )
    status = answer.get("status_code")
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise BackendUnavailable(f"the fetch service's answer has no valid status_code ({status!r})")
    raw_headers = answer.get("headers") or []
    pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    try:
        headers = httpx.Headers([(str(k), str(v)) for k, v in pairs])
    except (TypeError, ValueError):
        raise BackendUnavailable("the fetch service's answer has malformed headers") from None
    body_text = answer.get("body") or ""
    if not isinstance(body_text, str):
        raise BackendUnavailable("the fetch service's answer has a body that is not text")
    if answer.get("body_encoding") == "base64":
        try:
            body = base64.b64decode(body_text, validate=True)
        except (binascii.Error, ValueError):
            raise BackendUnavailable("the fetch service's base64 body does not decode") from None
    else:
        body = body_text.encode("utf-8", "surrogateescape")
    if len(body) > rules.max_body_bytes:
        raise TooLarge(f"body exceeds max_body_bytes {rules.max_body_bytes}", status_code=status)
    final = answer.get("final_url")
    return Response(
        url,
        final if isinstance(final, str) and final else url,
        status,
        headers,
        body,
        credits,
        exit_id,
        answer.get("rendered") is True,
        _document(answer.get("document")),
    )


def _document(value: Any) -> bytes | None:
    """A rendered page's document as the site sent it (base64 in the envelope); None if not sent."""
    if not isinstance(value, str):
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BackendUnavailable("the fetch service's base64 document does not decode") from None


def _number(value: Any) -> float:
    try:
        n = float(value)
    except (TypeError, ValueError):
        return 0.0
    return n if n >= 0 and n == n else 0.0  # n == n: not NaN


def _message(raw: bytes) -> str:
    """The service's error message: its JSON `error`/`message`, else its text, on one line."""
    text = raw[:2000].decode("utf-8", "replace")
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split())[:300]
    if isinstance(data, dict):
        found = data.get("error") or data.get("message") or text
        return " ".join(str(found).split())[:300]
    return " ".join(text.split())[:300]


class RoutingFetcher:
    """The one Fetcher a worker holds: each URL goes to the backend its rules say (direct or api)."""

    def __init__(self, direct: Fetcher, api: ApiFetcher | None) -> None:
        self._direct = direct
        self._api = api

    @property
    def api(self) -> ApiFetcher | None:
        """The fetch-service backend, if one is configured."""
        return self._api

    async def fetch(
        self, url: str, rules: Rules, *, html_only: bool = True, headers: Headers | None = None
    ) -> Response:
        """Fetch `url` through the backend `rules.fetch_for(url)` names."""
        if rules.fetch_for(url).via == "api":
            if self._api is None:
                raise ConfigError(f"{url} is to be fetched through `fetch: api`, but no fetch service is set")
            return await self._api.fetch(url, rules, html_only=html_only, headers=headers)
        return await self._direct.fetch(url, rules, html_only=html_only, headers=headers)

    @asynccontextmanager
    async def stream(
        self, url: str, rules: Rules, *, headers: Headers | None = None
    ) -> AsyncIterator[Streamed]:
        """`url`'s answer with its body as it comes, through the backend its rules name (a fetch
        service's answer is read whole first)."""
        backend: Fetcher = self._direct
        if rules.fetch_for(url).via == "api":
            if self._api is None:
                raise ConfigError(f"{url} is to be fetched through `fetch: api`, but no fetch service is set")
            backend = self._api
        async with streamed(backend, url, rules, headers=headers) as answer:
            yield answer

    async def aclose(self) -> None:
        """Release both backends' connections."""
        await self._direct.aclose()
        if self._api is not None:
            await self._api.aclose()
