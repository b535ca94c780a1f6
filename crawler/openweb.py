"""domains.yaml's sections for crawling the open web: `discover:`, `dns:` and `per_ip:`."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from crawler.errors import BadHost, ConfigError
from crawler.hosts.checks import check_suffix, suffix_matches

SECTIONS = ("discover", "dns", "per_ip")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _suffix(value: str) -> str:
    try:
        return check_suffix(value)
    except BadHost as exc:
        raise ValueError(str(exc)) from None


Suffix = Annotated[str, AfterValidator(_suffix)]


class HostTemplate(_Strict):
    """What a host found by a link gets: its rate and burst, how far it is crawled, and whether it is
    crawled again."""

    rate: Annotated[float, Field(gt=0)] = 1.0
    burst: Annotated[int, Field(ge=1)] = 1
    max_pages: Annotated[int, Field(ge=1)] = 50
    max_depth: Annotated[int, Field(ge=0)] = 3
    # Over the defaults' when given (`off` or null: discovered hosts are not recrawled, whatever the
    # defaults say); checked as a domain's are, by crawler/config/model.py, which knows their rules.
    recrawl: Mapping[str, Any] | Literal[False] | None = None
    sitemaps: bool | Literal["auto"] | None = None


class Discover(_Strict):
    """Which hosts found by links a crawl follows, and how many."""

    follow: Literal["none", "all"] = "none"
    allow: tuple[Suffix, ...] = ()  # host suffixes admitted; empty admits any
    deny: tuple[Suffix, ...] = ()  # host suffixes refused, whatever allow says
    max_hosts: Annotated[int, Field(ge=1)] = 200_000  # per crawl
    # Per registered domain (Public Suffix List) per crawl: a generator of subdomains is a bounded trap.
    max_hosts_per_domain: Annotated[int, Field(ge=1)] = 100
    allow_ip_hosts: bool = False  # URLs whose host is an IP address
    host: HostTemplate = HostTemplate()
    # Queues every discovered host's URLs share, a host always in the same one (crawler/frontier/hosts.py).
    shards: Annotated[int, Field(ge=1, le=1024)] = 16

    def in_scope(self, host: str) -> bool:
        """True if links to canonical `host` may be followed (a listed domain's hosts aside)."""
        if self.follow == "none" or any(suffix_matches(host, s) for s in self.deny):
            return False
        return not self.allow or any(suffix_matches(host, s) for s in self.allow)


@dataclass(frozen=True, slots=True)
class Nameserver:
    """A name server's address and port, written `127.0.0.1:5354`, `[::1]:5354` or `10.0.0.2`."""

    address: str
    port: int = 53

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


def _nameserver(value: Any) -> Nameserver:
    if isinstance(value, Nameserver):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r}: write a name server as '127.0.0.1:5354' (an address and a port)")
    text = value.strip()
    host, port = text, "53"
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":") or "53"
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    try:
        address = str(ipaddress.ip_address(host))
    except ValueError:
        raise ValueError(
            f"{value!r}: a name server is an IP address with an optional port, e.g. '127.0.0.1:5354'"
        ) from None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r}: the port must be a number from 1 to 65535")
    return Nameserver(address, int(port))


class DnsConfig(_Strict):
    """How host names are resolved, and how long answers and failures are kept fleet-wide."""

    # Absent: the system's resolver (getaddrinfo: /etc/hosts, then /etc/resolv.conf's servers).
    nameservers: tuple[Annotated[Nameserver, BeforeValidator(_nameserver)], ...] | None = None
    timeout: Annotated[float, Field(gt=0)] = 5.0  # one lookup, every name server and try together
    min_ttl: Annotated[float, Field(ge=0)] = 30.0  # an answer is kept at least this long (floor) ...
    max_ttl: Annotated[float, Field(gt=0)] = 3600.0  # ... and at most this long (ceiling)
    default_ttl: Annotated[float, Field(gt=0)] = 300.0  # the system's resolver tells no TTL
    negative_ttl: Annotated[float, Field(gt=0)] = 300.0  # NXDOMAIN, when the answer gives no SOA
    backoff: Annotated[float, Field(gt=0)] = 10.0  # after a failure (timeout, SERVFAIL), doubling ...
    max_backoff: Annotated[float, Field(gt=0)] = 600.0  # ... up to this
    park_after: Annotated[int, Field(ge=1)] = 5  # failures in a row that park a host ...
    park_for: Annotated[float, Field(gt=0)] = 3600.0  # ... for this long

    @model_validator(mode="after")
    def _ordered(self) -> DnsConfig:
        if self.min_ttl > self.max_ttl:
            raise ValueError(f"min_ttl ({self.min_ttl:g}) is above max_ttl ({self.max_ttl:g})")
        if self.backoff > self.max_backoff:
            raise ValueError(f"backoff ({self.backoff:g}) is above max_backoff ({self.max_backoff:g})")
        return self

    def kept(self, ttl: float | None, *, negative: bool = False) -> float:
        """Seconds an answer with `ttl` (None: none given) is kept, within min_ttl and max_ttl."""
        if ttl is None:
            ttl = self.negative_ttl if negative else self.default_ttl
        return min(self.max_ttl, max(self.min_ttl, ttl))


class PerIp(_Strict):
    """The budget every host on one IP address shares, fleet-wide."""

    rate: Annotated[float, Field(gt=0)]
    burst: Annotated[int, Field(ge=1)] = 1


class OpenWeb(_Strict):
    """The three sections together, as domains.yaml holds them."""

    discover: Discover = Discover()
    dns: DnsConfig = DnsConfig()
    per_ip: PerIp | None = None  # absent: no budget per address, only per host


def parse_open_web(raw: Mapping[str, Any], source: str = "domains.yaml") -> OpenWeb:
    """The `discover:`, `dns:` and `per_ip:` sections of a parsed domains.yaml (other keys ignored);
    ConfigError in one line naming the key if one is invalid."""
    try:
        return OpenWeb.model_validate({k: raw[k] for k in SECTIONS if k in raw and raw[k] is not None})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {one_line(exc)}") from None


def one_line(exc: ValidationError) -> str:
    """A validation error as one line: each failing key's path and what is wrong with it."""
    return "; ".join(describe(err) for err in exc.errors())


def describe(err: ErrorDetails) -> str:
    """One of pydantic's errors as `key.path: what is wrong`."""
    where = ".".join(str(p) for p in err["loc"]) or "(top level)"
    if err["type"] == "extra_forbidden":
        return f"{where}: unknown key (check its spelling against the table of keys in docs/configuration.md)"
    return f"{where}: {err['msg'].removeprefix('Value error, ')}"
