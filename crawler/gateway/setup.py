"""What proxies.yaml says now, as one request uses it: a reload swaps it whole, a request keeps its own."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from crawler.fetch.connect import AddressPolicy, GuardedBackend
from crawler.gateway.proxies import ApiKey, ProxiesConfig


@dataclass(frozen=True, slots=True)
class Setup:
    """The configuration, its keys by secret, its exits' proxy URLs by id and the target guard."""

    config: ProxiesConfig
    keys: dict[str, ApiKey]
    proxies: dict[str, str]
    guard: GuardedBackend

    @classmethod
    def of(cls, config: ProxiesConfig, env: Mapping[str, str]) -> Setup:
        """The setup of `config`, its secrets read from `env`."""
        return cls(
            config,
            {env[k.key_env]: k for k in config.keys},
            {e.id: e.proxy_url(env) for e in config.exits},
            GuardedBackend(
                config.resolve, AddressPolicy(config.allow_private_networks, config.allow_networks)
            ),
        )
