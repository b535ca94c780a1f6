"""One checker of host names for every input: URLs, the `discover:` scope and the domains file.

A name comes out lower case, without a trailing dot, its IDN labels as punycode (`bücher.test` ->
`xn--bcher-kva.test`); what cannot be a host name is refused with a reason that says how to fix it.
"""

from __future__ import annotations

import ipaddress
import re
import socket

import idna

from crawler.errors import BadHost

MAX_NAME = 253  # RFC 1035: a name's text, without the trailing dot
MAX_LABEL = 63
# Letters, digits and hyphens (RFC 952/1123); underscores too, as real hosts (and DNS) use them.
_LABEL = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?$")


def check_host(text: str, *, allow_ip: bool = False) -> str:
    """The canonical spelling of a URL's host; BadHost if it is none (or an IP literal not allowed)."""
    name = text.strip()
    _no_wildcard(name, text)
    literal = _ip_literal(name)
    if literal is not None:
        if not allow_ip:
            raise BadHost(
                f"{text!r} is an IP address (or spelt as one), not a host name: IP-literal hosts are "
                "refused unless discover's allow_ip_hosts is true"
            )
        return f"[{literal}]" if ":" in literal else literal
    return _name(name, text)


def check_domain(text: str) -> str:
    """The canonical spelling of a listed domain (it covers its subdomains); BadHost if it is none."""
    name = text.strip()
    if name.startswith("*."):
        raise BadHost(f"{text!r}: wildcards are not needed: write {name[2:]!r}, which covers its subdomains")
    if name.startswith(".") and not name.startswith(".."):
        raise BadHost(
            f"{text!r}: a domain has no leading dot: write {name[1:]!r}, which covers its subdomains"
        )
    _no_wildcard(name, text)
    if _ip_literal(name) is not None:
        raise BadHost(f"{text!r} is an IP address (or spelt as one): list a domain name")
    return _name(name, text)


def check_suffix(text: str) -> str:
    """The canonical spelling of a host suffix (`.test`, `shop.test`) as `discover:` allow/deny take
    it, with its leading dot; BadHost if it is none."""
    name = text.strip()
    if name.startswith("*."):
        raise BadHost(
            f"{text!r}: a suffix needs no wildcard: write {name[1:]!r}, which matches every host under it"
        )
    bare = name[1:] if name.startswith(".") else name
    _no_wildcard(bare, text)
    if _ip_literal(bare) is not None:
        raise BadHost(f"{text!r} is an IP address: a suffix is a domain name such as '.test'")
    return "." + _name(bare, text)


def suffix_matches(host: str, suffix: str) -> bool:
    """True if canonical `host` is the canonical `suffix` (`.shop.test`) or lies under it."""
    return host == suffix[1:] or host.endswith(suffix)


def _no_wildcard(name: str, text: str) -> None:
    if name.endswith(".*") or name == "*":
        raise BadHost(
            f"{text!r}: a wildcard top-level domain cannot be listed: name each domain "
            "(e.g. shop.com, shop.net)"
        )
    if "*" in name:
        raise BadHost(f"{text!r}: '*' is not allowed in a host name; a domain covers its subdomains")
    if name.startswith("."):
        raise BadHost(f"{text!r}: a host name has no leading dot (write {name.lstrip('.')!r})")


def _ip_literal(name: str) -> str | None:
    """The address an IP-literal host spells (including inet_aton's 2130706433 and 0x7f.1), or None."""
    bare = name[1:-1] if name.startswith("[") and name.endswith("]") else name
    try:
        return str(ipaddress.ip_address(bare.split("%")[0]))
    except ValueError:
        pass
    # A name whose last label is all digits (or hex) is no DNS name: inet_aton reads it as an address.
    last = bare.rstrip(".").rpartition(".")[2].lower()
    if last and (last.isdigit() or re.fullmatch(r"0x[0-9a-f]*", last)):
        try:
            return str(ipaddress.IPv4Address(socket.inet_aton(bare.rstrip("."))))
        except OSError:
            return bare  # not an address, yet spelt like one: refuse it as one
    return None


def _name(name: str, text: str) -> str:
    if not name:
        raise BadHost("an empty host name")
    name = name.rstrip(".") if not name.endswith("..") else name
    try:
        ascii_name = idna.encode(name, uts46=True, transitional=False).decode("ascii").lower()
    except idna.IDNAError as exc:
        ascii_name = name.lower()
        if not ascii_name.isascii():
            raise BadHost(f"{text!r} is not a valid international host name ({exc})") from None
    if len(ascii_name) > MAX_NAME:
        raise BadHost(
            f"{text[:40]!r}... is {len(ascii_name)} characters long: a host name has at most {MAX_NAME}"
        )
    for label in ascii_name.split("."):
        if not label:
            raise BadHost(f"{text!r} has an empty label (two dots in a row, or a leading dot)")
        if len(label) > MAX_LABEL:
            raise BadHost(
                f"{text[:40]!r}: the label {label[:20]!r}... is {len(label)} characters long: "
                f"a label has at most {MAX_LABEL}"
            )
        if not _LABEL.match(label):
            raise BadHost(
                f"{text!r}: the label {label!r} may hold only letters, digits, '-' and '_', and may not "
                "begin or end with '-'"
            )
    return ascii_name
