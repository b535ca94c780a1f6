"""Bearer tokens with read and admin scopes, from the environment or a file, compared in constant time."""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from crawler.errors import ConfigError

Scope = Literal["read", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "admin")
MIN_TOKEN_LENGTH = 16  # a short token is guessable; refuse it rather than serve behind it


@dataclass(frozen=True, slots=True)
class Token:
    """One client's token: its name (for logs; the secret never is), its scope, the secret."""

    name: str
    scope: Scope
    secret: str = ""

    def __repr__(self) -> str:  # a token in a traceback or a log line would be a leak
        return f"Token(name={self.name!r}, scope={self.scope!r})"


def parse_tokens(text: str, source: str) -> list[Token]:
    """Tokens from `name:scope:secret` entries separated by commas or lines; ConfigError if malformed."""
    tokens = []
    for n, entry in enumerate(e.strip() for line in text.splitlines() for e in line.split(",")):
        if not entry or entry.startswith("#"):
            continue
        name, _, rest = entry.partition(":")
        scope, _, secret = rest.partition(":")
        if not name or scope not in SCOPES or len(secret) < MIN_TOKEN_LENGTH:
            raise ConfigError(
                f"{source}: entry {n + 1} is not name:scope:token with scope read or admin and a token "
                f"of at least {MIN_TOKEN_LENGTH} characters (make one with `openssl rand -hex 32`)"
            )
        tokens.append(Token(name, "admin" if scope == "admin" else "read", secret))
    return tokens


def load_tokens(env: Mapping[str, str] | None = None) -> list[Token]:
    """Tokens from CRAWLER_API_TOKENS and the file CRAWLER_API_TOKENS_FILE; ConfigError if none."""
    env = os.environ if env is None else env
    tokens = parse_tokens(env.get("CRAWLER_API_TOKENS", ""), "CRAWLER_API_TOKENS")
    path = env.get("CRAWLER_API_TOKENS_FILE")
    if path:
        try:
            tokens += parse_tokens(Path(path).read_text(), path)
        except OSError as exc:
            raise ConfigError(f"cannot read CRAWLER_API_TOKENS_FILE {path}: {exc.strerror}") from None
    if not tokens:
        raise ConfigError(
            "no API tokens: set CRAWLER_API_TOKENS=name:scope:token (scope read or admin), "
            "or CRAWLER_API_TOKENS_FILE to a file of such lines"
        )
    return tokens


def authenticate(tokens: list[Token], presented: str) -> Token | None:
    """The token `presented` matches, or None; every token is compared, in constant time each."""
    found = None
    given = presented.encode()
    for token in tokens:
        # No early exit: the time taken says nothing about which token, or how much of one, matched.
        if hmac.compare_digest(token.secret.encode(), given):
            found = token
    return found


def allows(token: Token, needed: Scope) -> bool:
    """Whether `token`'s scope covers `needed` (admin covers read)."""
    return token.scope == "admin" or needed == "read"
