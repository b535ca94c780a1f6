"""Custom parse hooks: `parse: "package.module:function"` per domain or per URL rule.

A hook receives a `HookPage` and returns its fields (a mapping), a `Parsed` (fields and links) or
None. Plain functions run in a thread pool of their own, so a slow one holds neither the event loop
nor the threads the sink writes with; async ones run on the loop. Either is bounded by a deadline.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import traceback
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

from lxml import etree

from crawler.config import Rules, import_hook
from crawler.errors import HookFailed
from crawler.redact import redact

if TYPE_CHECKING:
    from bs4 import BeautifulSoup

# Threads for hooks alone: a hook stuck past its deadline keeps its thread (Python cannot stop one),
# and must not take one the sink or the resolver needs.
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="parse-hook")
MAX_TRACEBACK = 4000


@dataclass(frozen=True, slots=False)  # cached_property needs a __dict__
class HookPage:
    """What a hook gets: the page's URL, status, headers, lxml tree and (on demand) BeautifulSoup."""

    url: str
    status: int
    headers: Mapping[str, str]
    tree: etree._Element
    data: Mapping[str, Any] = field(default_factory=dict)  # the declarative fields already extracted

    @cached_property
    def soup(self) -> BeautifulSoup:
        """The page as a BeautifulSoup object, built the first time a hook asks (it costs ~10 ms)."""
        from bs4 import BeautifulSoup

        return BeautifulSoup(etree.tostring(self.tree, encoding="unicode", method="html"), "lxml")


@dataclass(frozen=True, slots=True)
class Parsed:
    """A hook's result: fields to add to the row's data, links to route (relative ones allowed)."""

    fields: Mapping[str, Any] = field(default_factory=dict)
    links: Sequence[str] = ()


def hook_for(rules: Rules, url: str) -> str | None:
    """The hook for `url`: the first `parsers` rule matching its path and query, else `parse`."""
    if rules.parsers:
        try:
            parts = urlsplit(url)
        except ValueError:
            return rules.parse
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        for rule in rules.parsers:
            if re.search(rule.match, target):
                return rule.parse
    return rules.parse


async def run_hook(ref: str, page: HookPage, seconds: float, max_links: int) -> Parsed:
    """Run the hook `ref` on `page` within `seconds`; HookFailed if it raises or overruns."""
    try:
        hook = import_hook(ref)
    except ValueError as exc:  # configuration was checked at load; the module may have changed since
        raise HookFailed(f"parse hook {exc}") from None
    try:
        if inspect.iscoroutinefunction(hook):
            result = await asyncio.wait_for(hook(page), seconds)
        else:
            loop = asyncio.get_running_loop()
            result = await asyncio.wait_for(loop.run_in_executor(_POOL, hook, page), seconds)
    except TimeoutError:
        raise HookFailed(
            f"parse hook {ref} did not return within {seconds:.3g}s (the page's deadline)"
        ) from None
    except Exception as exc:
        # The traceback's end is where the hook failed; its start is the crawler's own frames.
        tb = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK:]
        raise HookFailed(redact(f"parse hook {ref} raised {type(exc).__name__}: {exc}\n{tb}")) from None
    return _normalise(ref, result, page.url, max_links)


def _normalise(ref: str, result: Any, url: str, max_links: int) -> Parsed:
    if result is None:
        return Parsed()
    if isinstance(result, Mapping):
        result = Parsed(fields=result)
    if not isinstance(result, Parsed):
        raise HookFailed(
            f"parse hook {ref} returned {type(result).__name__}; expected a dict, Parsed or None"
        )
    links: list[str] = []
    for href in result.links:
        if len(links) >= max_links:
            break
        try:
            link = urljoin(url, str(href).strip())
        except ValueError:
            continue
        if link[:8].lower().startswith(("http://", "https://")):
            links.append(link)
    try:
        # The row's data is JSON: a date or a set becomes its text here, not a failed write later.
        fields = json.loads(json.dumps({str(k): v for k, v in result.fields.items()}, default=str))
    except (TypeError, ValueError) as exc:  # e.g. a circular structure
        raise HookFailed(f"parse hook {ref} returned fields that are not JSON: {exc}") from None
    return Parsed(fields, links)
