"""The domains file: one domain a line, for lists too long for domains.yaml."""

from __future__ import annotations

from pathlib import Path

from crawler.errors import BadHost, ConfigError
from crawler.hosts.checks import check_domain


def read_domains_file(path: str | Path) -> dict[str, int]:
    """The domains a file lists, canonical, in order, once each, with the line of each; `#` starts a
    comment and blank lines are skipped. ConfigError naming the file and line of the first bad line."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the domains file ({exc.strerror})") from None
    seen: dict[str, int] = {}
    for number, raw in enumerate(data.splitlines(), start=1):
        try:
            line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
        except UnicodeDecodeError:
            raise ConfigError(f"{path}:{number}: not UTF-8 text; save the file as UTF-8") from None
        text = line.partition("#")[0].strip()
        if not text:
            continue
        if len(text.split()) > 1:
            raise ConfigError(f"{path}:{number}: {text!r}: one domain a line")
        if "/" in text:
            raise ConfigError(f"{path}:{number}: {text!r}: a domain, not a URL (e.g. shop.example)")
        try:
            seen.setdefault(check_domain(text), number)
        except BadHost as exc:
            raise ConfigError(f"{path}:{number}: {exc}") from None
    return seen
