"""The bench's static site: H hosts x N pages of ~30 KB with ~40 same-site links each, deterministic.

Each host is an IP on loopback (127.0.0.31, .32, ...) so every tool reaches it without a resolver and
the crawler's domains.yaml can name the IPs as domains. Page 0 of a host is its index ("/"); page i
links to its children 10i+1 .. 10i+10, so every page is reachable from the index within five hops
(for 5,000 pages), plus random same-site links up to ~40 and a few links to other hosts.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORMAT = 1  # bump when the pages change, so a cached site is regenerated
STAMP = "site.json"
DEFAULT_PAGES = 5000
FANOUT = 10  # children linked from each page: keeps the whole site within a few hops of the index
_FILLER = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore "
    "et dolore magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip "
    "ex ea commodo consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla "
    "pariatur excepteur sint occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim "
    "id est laborum product shipping warranty colour size material stock review delivery"
)
WORDS = _FILLER.split()


def _ips(count: int) -> tuple[str, ...]:
    return tuple(f"127.0.0.{31 + i}" for i in range(count))


@dataclass(frozen=True, slots=True)
class SiteSpec:
    """Shape of the generated site; equal specs give byte-identical sites."""

    pages: int = DEFAULT_PAGES  # per host, the index included
    hosts: tuple[str, ...] = field(default_factory=lambda: _ips(4))
    port: int = 8081
    links: int = 40  # same-site links per page (fewer on a site too small to have that many)
    cross_links: int = 2  # links to pages of other hosts
    page_bytes: int = 30_000
    seed: str = "bench"

    def __post_init__(self) -> None:
        if self.pages < 1:
            raise ValueError(f"pages must be at least 1, got {self.pages}")
        if not self.hosts:
            raise ValueError("at least one host is needed")

    def origin(self, host: str) -> str:
        """Scheme, host and port of `host`'s pages."""
        return f"http://{host}:{self.port}"

    def index_urls(self) -> list[str]:
        """Each host's index: the seeds of a crawl."""
        return [f"{self.origin(h)}/" for h in self.hosts]

    def url(self, host: str, page: int) -> str:
        """Canonical URL of one page."""
        return f"{self.origin(host)}{path(page)}"

    @property
    def total(self) -> int:
        """Pages on the whole site."""
        return self.pages * len(self.hosts)


def path(page: int) -> str:
    """URL path of page number `page` (0 is the index)."""
    return "/" if page == 0 else f"/p/{page}.html"


def file_name(page: int) -> str:
    """File of page number `page`, relative to its host's directory."""
    return "index.html" if page == 0 else f"p/{page}.html"


def _paragraphs(seed: str, count: int = 256) -> list[str]:
    rng = random.Random(f"{seed}:paragraphs")
    out = []
    for _ in range(count):
        words = rng.choices(WORDS, k=rng.randint(40, 120))
        out.append(f"<p>{' '.join(words).capitalize()}.</p>")
    return out


def _href(rng: random.Random, spec: SiteSpec, host: str, target: int, here: int) -> str:
    # Mixed spellings, as real sites have: absolute paths, relative paths and full URLs.
    style = rng.random()
    if style < 0.7 or target == 0:
        return path(target)
    if style < 0.9 and here != 0:
        return f"{target}.html"  # relative to /p/
    return spec.url(host, target)


def _links(spec: SiteSpec, host_index: int, page: int, rng: random.Random) -> list[str]:
    host = spec.hosts[host_index]
    targets = [c for c in range(page * FANOUT + 1, page * FANOUT + FANOUT + 1) if c < spec.pages]
    if page:
        targets.append(0)
    wanted = min(spec.links, spec.pages - 1)
    while len(targets) < wanted:
        targets.append(rng.randrange(spec.pages))
    hrefs = [_href(rng, spec, host, t, page) for t in targets]
    others = [h for h in spec.hosts if h != host]
    for _ in range(spec.cross_links if others else 0):
        hrefs.append(spec.url(rng.choice(others), rng.randrange(spec.pages)))
    rng.shuffle(hrefs)
    return hrefs


def render(spec: SiteSpec, host_index: int, page: int, paragraphs: list[str] | None = None) -> str:
    """The HTML of one page: a title, an h1, a price, its links and filler text up to page_bytes."""
    host = spec.hosts[host_index]
    rng = random.Random(f"{spec.seed}:{host}:{page}")
    title = f"Product {page} of {host}" if page else f"Home of {host}"
    price = f"{rng.randint(1, 999)}.{rng.randint(0, 99):02d} EUR"
    items = "\n".join(
        f'<li><a href="{href}">item {n}</a></li>'
        for n, href in enumerate(_links(spec, host_index, page, rng))
    )
    head = (
        f'<!doctype html>\n<html><head><meta charset="utf-8"><title>{title}</title></head>\n<body>\n'
        f'<h1>{title}</h1>\n<p class="price">{price}</p>\n<ul class="links">\n{items}\n</ul>\n'
    )
    tail = "</body></html>\n"
    pool = paragraphs if paragraphs is not None else _paragraphs(spec.seed)
    parts = [head]
    size = len(head) + len(tail)
    while size < spec.page_bytes:
        para = rng.choice(pool)
        parts.append(para + "\n")
        size += len(para) + 1
    parts.append(tail)
    return "".join(parts)


def pages(spec: SiteSpec) -> Iterator[tuple[str, int, str]]:
    """Every page as (host, page number, HTML)."""
    pool = _paragraphs(spec.seed)
    for h, host in enumerate(spec.hosts):
        for page in range(spec.pages):
            yield host, page, render(spec, h, page, pool)


def write(spec: SiteSpec, root: Path) -> Path:
    """Write the site under `root/<host>/`; a site already written from the same spec is kept."""
    stamp = root / STAMP
    wanted = json.dumps({"format": FORMAT, **asdict(spec)}, sort_keys=True)
    if stamp.is_file() and stamp.read_text() == wanted:
        return root
    if stamp.exists():
        stamp.unlink()
    for host in spec.hosts:
        (root / host / "p").mkdir(parents=True, exist_ok=True)
    for host, page, html in pages(spec):
        (root / host / file_name(page)).write_text(html, encoding="utf-8")
    # Written last: a half-written site is never taken for a finished one.
    stamp.write_text(wanted)
    return root


def main() -> None:
    """Write a site to a directory (python -m bench.site DIR [--pages N])."""
    parser = argparse.ArgumentParser(prog="python -m bench.site", description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=Path)
    parser.add_argument(
        "--pages", type=int, default=DEFAULT_PAGES, help="pages per host (default %(default)s)"
    )
    args = parser.parse_args()
    spec = SiteSpec(pages=args.pages)
    write(spec, args.directory)
    print(f"{spec.total} pages under {args.directory}")


if __name__ == "__main__":
    main()
