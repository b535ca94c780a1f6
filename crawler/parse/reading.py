"""Reading a page: its fields, structured data and links, then its parse hook, its required fields and
its signature; the same for a page just fetched and one read again from the archive."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from crawler.config import Rules
from crawler.errors import HookFailed
from crawler.parse.extract import Extracted, Fields, charset_from_content_type, extract
from crawler.parse.fields import missing_required
from crawler.parse.hooks import HookPage, hook_for, run_hook
from crawler.parse.signature import signature

PARSE_HOOK = "(parse hook)"  # the `field` label of a failed parse hook in crawler_extraction_failures_total


@dataclass(frozen=True, slots=True)
class PageRead:
    """What a page's extraction made of it: title, fields and links; the error that fails it (its
    hook's, or required fields missing) and what to blame; its signature, if asked for and it read."""

    title: str | None
    data: dict[str, Any]
    links: list[str]
    error: str | None = None
    blamed: tuple[str, ...] = ()  # the required fields missing, or PARSE_HOOK
    signature: str | None = None


async def read_page(
    url: str,
    final_url: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    content_type: str | None,
    rules: Rules,
    fields: Fields,
    *,
    seconds: float,
    sign: bool = False,
) -> PageRead:
    """Extract `body` (the answer to `url`, from `final_url`) as `rules` say; a hook gets `seconds`."""
    page = _extract(body, final_url, content_type, rules, fields)
    hook = hook_for(rules, url)
    if hook is None or page.root is None:
        return _checked(page, page.data, page.links, fields, sign)
    view = HookPage(final_url, status, headers, page.root, page.data)
    try:
        parsed = await run_hook(hook, view, seconds, rules.max_links)
    except HookFailed as exc:
        return PageRead(page.title, page.data, page.links, str(exc), (PARSE_HOOK,))
    links = list(dict.fromkeys([*page.links, *parsed.links]))
    return _checked(page, {**page.data, **parsed.fields}, links, fields, sign)


def read_page_now(
    url: str,
    final_url: str,
    body: bytes,
    content_type: str | None,
    rules: Rules,
    fields: Fields,
    *,
    sign: bool,
) -> PageRead | None:
    """`read_page` without an event loop, for a page with no parse hook; None if it has one."""
    if hook_for(rules, url) is not None:
        return None
    page = _extract(body, final_url, content_type, rules, fields)
    return _checked(page, page.data, page.links, fields, sign)


def _extract(
    body: bytes, final_url: str, content_type: str | None, rules: Rules, fields: Fields
) -> Extracted:
    return extract(
        body,
        final_url,
        charset=charset_from_content_type(content_type),
        fields=fields,
        max_links=rules.max_links,
        structured=rules.structured,
    )


def _checked(page: Extracted, data: dict[str, Any], links: list[str], fields: Fields, sign: bool) -> PageRead:
    """The reading, failed if a required field is missing; signed if asked."""
    if missing := missing_required(fields, data):
        names = ", ".join(repr(name) for name in missing)
        error = f"extraction: required field{'s' if len(missing) > 1 else ''} {names} missing"
        return PageRead(page.title, data, links, error, tuple(missing))
    # Last: it takes what no reader sees out of the parsed tree.
    signed = signature(page.root, page.title, data) if sign else None
    return PageRead(page.title, data, links, signature=signed)
