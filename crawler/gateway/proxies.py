"""config/proxies.yaml: the gateway's exits, keys, prices and ban rules, as one validated model.

Credentials are never written in the file: each names the environment variable holding it. A proxy's
credentials are sent in a Proxy-Authorization header, never written into a URL, so no error text
that quotes a proxy URL can carry them.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from crawler.errors import ConfigError
from crawler.gateway.render.options import RenderConfig

Ident = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


def _check_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as exc:
        raise ValueError(f"{value!r} is not a regular expression ({exc})") from None
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Exit(_Strict):
    """One way out: a forward proxy, its tier and country; credentials by environment reference."""

    id: Ident
    url: str
    username_env: EnvName | None = None
    password_env: EnvName | None = None
    tier: Literal["datacenter", "premium"] = "datacenter"
    country: Annotated[str, Field(pattern=r"^[A-Za-z]{2}$")] | None = None
    max_inflight: int = Field(16, ge=1, le=10_000)

    @field_validator("url")
    @classmethod
    def _proxy_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme != "http" or not parts.hostname or parts.port is None:
            raise ValueError(f"{value!r}: write a forward proxy as http://HOST:PORT")
        if parts.username or parts.password:
            raise ValueError("credentials do not belong in the URL: name them with username_env/password_env")
        return value

    @field_validator("country")
    @classmethod
    def _upper(cls, value: str | None) -> str | None:
        return value.upper() if value else value

    def proxy(self, env: Mapping[str, str]) -> ExitProxy:
        """The proxy's URL and, apart from it, its credentials from the environment."""
        user = env.get(self.username_env, "") if self.username_env else ""
        password = env.get(self.password_env, "") if self.password_env else ""
        if not user:
            return ExitProxy(self.url, None)
        return ExitProxy(self.url, "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())


@dataclass(frozen=True, slots=True)
class ExitProxy:
    """How requests go out through an exit: its URL (no credentials in it) and the
    Proxy-Authorization its credentials make, if it has any."""

    url: str
    authorization: str | None

    def __repr__(self) -> str:  # the credentials must not reach a log through a repr
        return f"ExitProxy(url={self.url!r}, authorization={'***' if self.authorization else None})"

    def options(self, headers: dict[str, str], tls: bool) -> dict[str, Any]:
        """aiohttp's request options for going through this exit. The credentials go with the
        CONNECT of an https request (proxy_headers), in the request itself for plain http."""
        if self.authorization is None:
            return {"proxy": self.url, "headers": headers}
        if tls:
            return {"proxy": self.url, "headers": headers, "proxy_headers": {PROXY_AUTH: self.authorization}}
        return {"proxy": self.url, "headers": {**headers, PROXY_AUTH: self.authorization}}


PROXY_AUTH = "Proxy-Authorization"


class ApiKey(_Strict):
    """A key callers present in X-API-Key; its ledger is kept under `id`, with an optional budget."""

    id: Ident
    key_env: EnvName
    budget: float | None = Field(None, gt=0)
    # Its requests in flight at once, fleet-wide: an envelope or a render is held whole (at most
    # 10 MB, ask.py), so this bounds the memory one key can take, as well as its share of the exits.
    max_concurrency: int = Field(32, ge=1, le=100_000)


MIN_KEY_LENGTH = 16  # a short key is guessable: refused at load, naming the key


class Cooldown(_Strict):
    """How long an (exit, domain) pair rests after a ban: base x 2^(bans in a row - 1), at most max."""

    base: float = Field(30.0, gt=0, le=86_400)
    max: float = Field(900.0, gt=0, le=86_400)
    jitter: float = Field(0.2, ge=0, le=1)


class Prices(_Strict):
    """Credits per answer that counts: plain or render_js, multiplied for a premium exit."""

    plain: float = Field(1.0, ge=0)
    render_js: float = Field(5.0, ge=0)
    premium: float = Field(10.0, ge=1)  # a multiple

    def price(self, render_js: bool, premium: bool) -> float:
        """What one answer costs."""
        return (self.render_js if render_js else self.plain) * (self.premium if premium else 1.0)


class ProxiesConfig(_Strict):
    """The whole of proxies.yaml."""

    exits: tuple[Exit, ...] = Field(min_length=1)
    keys: tuple[ApiKey, ...] = Field(min_length=1)
    min_interval: float = Field(1.0, ge=0, le=3_600)
    max_attempts: int = Field(3, ge=1, le=20)
    cooldown: Cooldown = Field(default_factory=Cooldown)
    ban_statuses: tuple[int, ...] = (403, 429, 503)
    block_markers: dict[str, Annotated[str, AfterValidator(_check_regex)]] = Field(default_factory=dict)
    dead_after: int = Field(5, ge=1, le=1_000)
    dead_for: float = Field(30.0, gt=0, le=86_400)
    probe_url: str | None = None
    session_ttl: float = Field(600.0, gt=0, le=86_400)
    prices: Prices = Field(default_factory=Prices)
    max_wait: float = Field(10.0, ge=0, le=600)  # longest a request waits for a free exit
    # A ban cools an (exit, domain) pair for the key that met it; for every key only once this many
    # keys met bans there (or every key, when fewer are configured). Failures mark an exit dead on
    # the same evidence. One key alone cannot take exits away from the others.
    ban_quorum: int = Field(3, ge=1, le=1_000)
    # /metrics and /healthz name API keys, their credits and the exits' state only to a caller
    # presenting this token (Authorization: Bearer); without one they show the rest.
    metrics_token_env: EnvName | None = None
    # PEM certificates trusted for https targets besides the system's (an intranet's own CA).
    ca_file: str | None = None
    # The same guard as the workers' (crawler/fetch/connect.py): private targets are refused.
    resolve: dict[str, str] = Field(default_factory=dict)
    allow_private_networks: bool = False
    allow_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    user_agent: str = Field("crawler-gateway/0.1", min_length=1)
    # Present: render_js=true requests are rendered in Chromium (crawler/gateway/render/). Read at
    # start; an edit of it takes effect when the gateway restarts.
    render: RenderConfig | None = None

    @field_validator("allow_networks", mode="before")
    @classmethod
    def _networks(cls, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            return value
        try:
            return tuple(ipaddress.ip_network(str(item)) for item in value)
        except ValueError as exc:
            raise ValueError(f"{exc}; write e.g. 10.1.0.0/16 or 127.0.0.21") from None

    @field_validator("resolve")
    @classmethod
    def _ips(cls, value: dict[str, str]) -> dict[str, str]:
        for host, ip in value.items():
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise ValueError(f"{host!r}: {ip!r} is not an IP address") from None
        return {h.lower(): ip for h, ip in value.items()}

    @model_validator(mode="after")
    def _unique(self) -> ProxiesConfig:
        for what, ids in (("exits", [e.id for e in self.exits]), ("keys", [k.id for k in self.keys])):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            if twice:
                raise ValueError(f"{what}: id {', '.join(twice)} listed twice")
        if self.cooldown.max < self.cooldown.base:
            raise ValueError("cooldown: max must be at least base")
        return self

    @property
    def quorum(self) -> int:
        """How many keys' bans (or failures) act for every key."""
        return min(self.ban_quorum, len(self.keys))

    def check_env(self, env: Mapping[str, str], source: str) -> None:
        """ConfigError naming every variable the file refers to that the environment lacks, and
        every key shorter than MIN_KEY_LENGTH."""
        wanted = [k.key_env for k in self.keys]
        wanted += [e.username_env for e in self.exits if e.username_env]
        wanted += [e.password_env for e in self.exits if e.password_env]
        if self.metrics_token_env:
            wanted.append(self.metrics_token_env)
        missing = sorted({name for name in wanted if not env.get(name)})
        if missing:
            raise ConfigError(f"{source}: environment variable(s) not set: {', '.join(missing)}")
        short = [
            f"key {k.id} ({k.key_env} holds {len(env[k.key_env])})"
            for k in self.keys
            if len(env[k.key_env]) < MIN_KEY_LENGTH
        ]
        if self.metrics_token_env and len(env[self.metrics_token_env]) < MIN_KEY_LENGTH:
            short.append(f"metrics token ({self.metrics_token_env} holds {len(env[self.metrics_token_env])})")
        if short:
            raise ConfigError(
                f"{source}: {'; '.join(short)} characters: a key needs at least {MIN_KEY_LENGTH} "
                "(make one with `openssl rand -hex 32`)"
            )
        if self.ca_file is not None and not os.access(self.ca_file, os.R_OK):
            raise ConfigError(f"{source}: ca_file {self.ca_file!r} cannot be read")

    def marker(self, domain: str) -> re.Pattern[str] | None:
        """The block-page regex of `domain` (or a parent domain), if any."""
        host = domain
        while host:
            if host in self.block_markers:
                return re.compile(self.block_markers[host])
            _, _, host = host.partition(".")
        return None


@dataclass(frozen=True, slots=True)
class Loaded:
    """A validated proxies.yaml and the modification time it was read at."""

    config: ProxiesConfig
    mtime: float


def parse_proxies(text: str, source: str, env: Mapping[str, str] | None = None) -> ProxiesConfig:
    """Validate proxies.yaml text; ConfigError naming the file, the key path and the rule."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping with `exits:` and `keys:` at the top level")
    try:
        config = ProxiesConfig.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{source}: invalid proxies configuration"]
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown key (see the worked example in config/proxies.yaml)"
            lines.append(f"  {where}: {msg}")
        raise ConfigError("\n".join(lines)) from None
    config.check_env(os.environ if env is None else env, source)
    return config


def load_proxies(path: str | Path, env: Mapping[str, str] | None = None) -> Loaded:
    """Read and validate proxies.yaml."""
    try:
        mtime = Path(path).stat().st_mtime
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the proxies file ({exc.strerror}); pass --proxies") from None
    return Loaded(parse_proxies(text, str(path), env), mtime)
