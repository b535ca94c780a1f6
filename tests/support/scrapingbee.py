"""A local imitation of ScrapingBee's HTML API, as its documentation describes it (no network).

GET /api/v1/?api_key=…&url=…&render_js=…&premium_proxy=…&country_code=…&session_id=…
&transparent_status_code=true: the target's body and status; its headers prefixed `Spb-`; the
cost in `Spb-cost` (1 plain, 5 render_js, 10 premium, 25 premium with render_js); the URL it ended
at in `Spb-resolved-url` and the first response's status in `Spb-initial-status-code` (ScrapingBee
follows redirects itself). Its own errors: 400 bad
parameters, 401 bad key or no credit left, 429 too many concurrent requests, 500 retry; none charged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

HOP_HEADERS = ("content-length", "transfer-encoding", "content-encoding")


def cost(render_js: bool, premium: bool) -> int:
    """ScrapingBee's documented price of one call."""
    return {(False, False): 1, (True, False): 5, (False, True): 10, (True, True): 25}[(render_js, premium)]


@dataclass
class ScrapingBee:
    key: str
    credits: float = 1000
    max_concurrency: int = 100
    fail_next: int = 0  # answer this many calls with 500
    charged: float = 0
    calls: list[dict[str, str]] = field(default_factory=list)
    _inflight: int = 0
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.47:{self.port}/api/v1/"

    async def start(self) -> ScrapingBee:
        app = web.Application()
        app.router.add_get("/api/v1/", self._call)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.47", 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _call(self, request: web.Request) -> web.Response:
        q = request.query
        self.calls.append(dict(q))
        if q.get("api_key") != self.key:
            return web.json_response({"message": "Invalid api key"}, status=401)
        if "url" not in q:
            return web.json_response({"message": "url is required"}, status=400)
        render_js = q.get("render_js", "true") == "true"  # its default is true
        premium = q.get("premium_proxy", "false") == "true"
        price = cost(render_js, premium)
        if self.charged + price > self.credits:
            return web.json_response({"message": "No more credit available"}, status=401)
        if self._inflight >= self.max_concurrency:
            return web.json_response({"message": "Too many concurrent requests"}, status=429)
        if self.fail_next:
            self.fail_next -= 1
            return web.json_response({"message": "Error, please retry"}, status=500)
        self._inflight += 1
        try:
            # It follows redirects, as ScrapingBee does.
            async with aiohttp.ClientSession(trust_env=False) as session, session.get(q["url"]) as resp:
                body = await resp.read()
                headers = {f"Spb-{k}": v for k, v in resp.headers.items() if k.lower() not in HOP_HEADERS}
                status, resolved = resp.status, str(resp.url)
                initial = resp.history[0].status if resp.history else status
                media = resp.headers.get("Content-Type", "text/html")
        finally:
            self._inflight -= 1
        self.charged += price
        headers |= {
            "Spb-cost": str(price),
            "Spb-resolved-url": resolved,
            "Spb-initial-status-code": str(initial),
            "Content-Type": media,
        }
        return web.Response(
            status=status if q.get("transparent_status_code") == "true" else 200, body=body, headers=headers
        )
