"""A site whose content and links exist only after its scripts run, for the renderer's tests."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field

from aiohttp import web

HOME = """<html><head><title>scripted</title></head><body>
<h1>shell</h1><ul id="items"></ul><ul id="more"></ul>
<img src="/img/big.png"><link rel="stylesheet" href="/style.css">
<script>
fetch('/api/items').then(r => r.json()).then(data => {
  const ul = document.getElementById('items');
  for (const it of data.items) {
    const li = document.createElement('li');
    li.innerHTML = '<a href="' + it.href + '">' + it.name + '</a>';
    ul.appendChild(li);
  }
  const p = document.createElement('p'); p.id = 'price'; p.textContent = data.price;
  document.body.appendChild(p);
});
setTimeout(() => {
  const a = document.createElement('a'); a.href = '/late'; a.textContent = 'late';
  document.body.appendChild(a);
}, 300);
async function loadMore(page) {
  const data = await (await fetch('/api/more?page=' + page)).json();
  const ul = document.getElementById('more');
  for (const it of data.items) {
    const li = document.createElement('li'); li.className = 'more';
    li.innerHTML = '<a href="' + it + '">' + it + '</a>';
    ul.appendChild(li);
  }
  if (data.next) { await loadMore(data.next); } else { ul.setAttribute('data-done', '1'); }
}
window.addEventListener('load', () => document.getElementById('load-more').click());
</script>
<button id="load-more" onclick="loadMore(1)">load more</button>
</body></html>"""

REDIRECT = """<html><head><title>moving</title>
<script>location.replace('/landing');</script></head><body>moving</body></html>"""

LANDING = """<html><head><title>landing</title></head><body><a href="/from-landing">on</a></body></html>"""

PROBE = """<html><head><title>probe</title></head><body><script>
fetch('{admin}').catch(() => null).finally(() => {{
  const p = document.createElement('p'); p.id = 'after'; p.textContent = 'rendered';
  document.body.appendChild(p);
}});
fetch('http://169.254.169.254/latest/meta-data/').catch(() => null);
try {{ new WebSocket('{admin}'.replace('http:', 'ws:')); }} catch (e) {{}}
</script></body></html>"""

# Never idle: a request every 100 ms for as long as the page lives.
RESTLESS = """<html><head><title>restless</title></head><body><script>
setInterval(() => fetch('/api/tick'), 100);
</script></body></html>"""

# Its content comes late (after /api/slow answers), so a render is in flight for a while.
SLOW = """<html><head><title>slow</title></head><body><script>
fetch('/api/slow').then(r => r.text()).then(t => {
  const p = document.createElement('p'); p.id = 'slow'; p.textContent = t;
  document.body.appendChild(p);
});
</script></body></html>"""


COOKIE = """<html><head><title>cookie</title></head><body><p id="seen"></p><script>
document.getElementById('seen').textContent = document.cookie;
document.cookie = 'visited=1; path=/';
</script></body></html>"""


# What a session keeps: its cookies and its localStorage, shown then set.
KEPT = """<html><head><title>kept</title></head><body><p id="seen"></p><p id="stored"></p><script>
document.getElementById('seen').textContent = document.cookie;
document.getElementById('stored').textContent = localStorage.getItem('who') || '';
document.cookie = 'visited=1; path=/';
localStorage.setItem('who', 'stored-before');
</script></body></html>"""


# A small document whose DOM grows past 5 KB once its script runs.
GROW = """<html><head><title>grow</title></head><body><script>
document.body.insertAdjacentHTML('beforeend', '<p>' + 'x'.repeat(5000) + '</p>');
</script></body></html>"""


@dataclass
class ScriptedSite:
    """The scripted pages on `ip`; `log` holds (monotonic time, path) of every request."""

    ip: str
    slow_for: float = 0.0
    log: list[tuple[float, str]] = field(default_factory=list)
    admin: str = "http://127.0.0.22:1/admin"
    _runner: web.AppRunner | None = None
    port: int = 0

    def url(self, host: str, path: str = "/") -> str:
        return f"http://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [path for _, path in self.log]

    async def start(self) -> ScriptedSite:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.ip, 0).start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        self.log.append((time.monotonic(), request.path_qs))
        html = {
            "/": HOME,
            "/redirect": REDIRECT,
            "/landing": LANDING,
            "/probe": PROBE.format(admin=self.admin),
            "/restless": RESTLESS,
            "/slow": SLOW,
            "/cookie": COOKIE,
            "/kept": KEPT,
            "/grow": GROW,
        }.get(path)
        if html is not None:
            return web.Response(text=html, content_type="text/html")
        if path == "/api/items":
            items = [{"href": f"/item/{i}", "name": f"item {i}"} for i in range(3)]
            items.append({"href": "/redirect", "name": "moving"})
            return web.json_response({"items": items, "price": "12.50"})
        if path == "/api/more":
            page = int(request.query.get("page", "1"))
            items = [f"/more/{page}-{i}" for i in range(2)]
            return web.json_response({"items": items, "next": page + 1 if page < 3 else None})
        if path == "/api/slow":
            await asyncio.sleep(self.slow_for)
            return web.Response(text="slow content")
        if path.startswith("/api/"):
            return web.Response(text=json.dumps({"ok": True}), content_type="application/json")
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n", content_type="text/plain")
        if path.startswith(("/item/", "/more/", "/late", "/from-landing")):
            return web.Response(
                text=f"<html><title>{path}</title><h1>{path}</h1></html>", content_type="text/html"
            )
        return web.Response(status=404, text="<html>no</html>", content_type="text/html")
