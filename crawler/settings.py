"""Where the services are: read from the environment once, at the command line, and passed down."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from crawler.names import DEFAULT_PREFIX, Names


@dataclass(frozen=True, slots=True)
class Settings:
    """Service URLs and the config path of one process."""

    amqp_url: str = "amqp://guest:guest@localhost:5672/"
    redis_url: str = "redis://localhost:6379/0"
    database_url: str = "sqlite:///crawl.db"
    config_path: str = "config/domains.yaml"
    prefix: str = DEFAULT_PREFIX
    management_url: str | None = None  # RabbitMQ management API; None: the AMQP host on port 15672
    dedup: str | None = None  # dedup mode overriding domains.yaml's `dedup.mode`; None: the file's
    fetch_api_url: str | None = None  # the fetch service (`fetch: api`); never from domains.yaml
    fetch_api_key: str = field(default="", repr=False)  # a secret: kept out of reprs and logs

    @property
    def names(self) -> Names:
        """Names of this crawl's queues and keys."""
        return Names(self.prefix)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from CRAWLER_* variables, each falling back to a one-machine default."""
        env = os.environ if env is None else env
        base = cls()
        return cls(
            amqp_url=env.get("CRAWLER_AMQP_URL", base.amqp_url),
            redis_url=env.get("CRAWLER_REDIS_URL", base.redis_url),
            database_url=env.get("CRAWLER_DATABASE_URL", base.database_url),
            config_path=env.get("CRAWLER_CONFIG", base.config_path),
            prefix=env.get("CRAWLER_PREFIX", base.prefix),
            management_url=env.get("CRAWLER_MANAGEMENT_URL") or None,
            dedup=env.get("CRAWLER_DEDUP") or None,
            fetch_api_url=env.get("CRAWLER_FETCH_API_URL", "").strip() or None,
            fetch_api_key=env.get("CRAWLER_FETCH_API_KEY", ""),
        )
