"""What proxies.yaml says now, as one request uses it: a reload swaps it whole, a request keeps its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from crawler.fetch.connect import AddressPolicy, GuardedBackend
from crawler.gateway.proxies import ApiKey, ExitProxy, ProxiesConfig


@dataclass(frozen=True, slots=True)
class Setup:
    """The configuration, its keys by secret, its exits' proxies by id, the metrics token and the
    target guard."""

    config: ProxiesConfig
    keys: dict[str, ApiKey]
    proxies: dict[str, ExitProxy]
    guard: GuardedBackend
    metrics_token: str | None = None

    def __repr__(self) -> str:  # its secrets must not reach a log through a repr
        return f"Setup({len(self.config.exits)} exits, {len(self.keys)} keys)"

    @classmethod
    def of(cls, config: ProxiesConfig, env: Mapping[str, str]) -> Setup:
        """The setup of `config`, its secrets read from `env`."""
        return cls(
            config,
            {env[k.key_env]: k for k in config.keys},
            {e.id: e.proxy(env) for e in config.exits},
            GuardedBackend(
                config.resolve, AddressPolicy(config.allow_private_networks, config.allow_networks)
            ),
            env[config.metrics_token_env] if config.metrics_token_env else None,
        )
