"""Where the services are: read from the environment once, at the command line, checked, and passed
down. A malformed value is refused here, naming its variable, before anything connects."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from urllib.parse import SplitResult, urlsplit

from crawler import sentinel
from crawler.errors import ConfigError
from crawler.names import DEFAULT_PREFIX, Names
from crawler.storage.location import ObjectUrl, is_object_url

_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")

# Each setting's environment variable: what an error about it names.
ENV = {
    "amqp_url": "CRAWLER_AMQP_URL",
    "redis_url": "CRAWLER_REDIS_URL",
    "database_url": "CRAWLER_DATABASE_URL",
    "config_path": "CRAWLER_CONFIG",
    "prefix": "CRAWLER_PREFIX",
    "management_url": "CRAWLER_MANAGEMENT_URL",
    "dedup": "CRAWLER_DEDUP",
    "fetch_api_url": "CRAWLER_FETCH_API_URL",
    "fetch_api_key": "CRAWLER_FETCH_API_KEY",
    "archive_dir": "CRAWLER_ARCHIVE_DIR",
    "archive_spool": "CRAWLER_ARCHIVE_SPOOL",
    "s3_endpoint_url": "CRAWLER_S3_ENDPOINT_URL",
}


@dataclass(frozen=True, slots=True)
class Settings:
    """Service URLs and the config path of one process."""

    amqp_url: str = "amqp://guest:guest@localhost:5672/"
    redis_url: str = "redis://localhost:6379/0"
    database_url: str = "sqlite:///crawl.db"
    config_path: str = "config/domains.yaml"
    prefix: str = DEFAULT_PREFIX
    management_url: str | None = None  # RabbitMQ management API; None: the AMQP host on port 15672
    # Overrides domains.yaml's `dedup.mode` (checked by its model, in with_dedup_mode); None: the file's
    dedup: str | None = None
    fetch_api_url: str | None = None  # the fetch service (`fetch: api`); never from domains.yaml
    fetch_api_key: str = field(default="", repr=False)  # a secret: kept out of reprs and logs
    # The WARC files of domains with `archive: true`: a directory shared by a fleet, or s3://BUCKET/PREFIX
    archive_dir: str = "archive"
    # Where files are written before their upload, when archive_dir is in object storage
    archive_spool: str = "archive-spool"
    s3_endpoint_url: str | None = None  # any S3-compatible store; None: AWS (or AWS_ENDPOINT_URL_S3)

    def __post_init__(self) -> None:
        for f in fields(self):
            check = _CHECKS.get(f.name)
            value = getattr(self, f.name)
            problem = check(value) if check is not None and value is not None else None
            if problem is not None:
                # Printed by the programs through redact(), which hides a URL's password.
                raise ConfigError(f"{ENV[f.name]}={value!r}: {problem}")

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
            amqp_url=env.get(ENV["amqp_url"], base.amqp_url),
            redis_url=env.get(ENV["redis_url"], base.redis_url),
            database_url=env.get(ENV["database_url"], base.database_url),
            config_path=env.get(ENV["config_path"], base.config_path),
            prefix=env.get(ENV["prefix"], base.prefix),
            management_url=env.get(ENV["management_url"]) or None,
            dedup=env.get(ENV["dedup"]) or None,
            fetch_api_url=env.get(ENV["fetch_api_url"], "").strip() or None,
            fetch_api_key=env.get(ENV["fetch_api_key"], ""),
            archive_dir=env.get(ENV["archive_dir"], base.archive_dir),
            archive_spool=env.get(ENV["archive_spool"], base.archive_spool),
            s3_endpoint_url=env.get(ENV["s3_endpoint_url"], "").strip() or None,
        )


def _url(value: str, schemes: tuple[str, ...]) -> SplitResult | None:
    """`value` split, if it is a URL of one of `schemes` whose port (if any) is a port."""
    try:
        parts = urlsplit(value.strip())
        _ = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError:
        return None
    return parts if parts.scheme.lower() in schemes else None


def _amqp(value: str) -> str | None:
    listed = [node.strip() for node in value.split(",")]
    for node in listed:
        parts = _url(node, ("amqp", "amqps"))
        if parts is None or not parts.hostname or parts.path.count("/") > 1:
            return (
                "not a RabbitMQ URL: write amqp://HOST:5672/VHOST, USER:PASSWORD@ before HOST (amqps:// "
                "for TLS); the nodes of a cluster as such URLs separated by commas"
            )
    if len({urlsplit(node).path for node in listed}) > 1:
        return "the nodes of a cluster are one vhost: give every URL the same /VHOST"
    return None


def _redis(value: str) -> str | None:
    if sentinel.is_sentinel(value):
        try:
            sentinel.parse(value)
        except ValueError as exc:
            return str(exc)
        return None
    parts = _url(value, ("redis", "rediss", "unix"))
    well_formed = parts is not None and (
        bool(parts.path) if parts.scheme == "unix" else bool(parts.hostname) and _redis_db(parts.path)
    )
    if not well_formed:
        return (
            "not a Redis URL: write redis://HOST:6379/0 (rediss:// for TLS, unix:///PATH for a socket, "
            f"{sentinel.SHAPE} through Sentinel)"
        )
    return None


def _redis_db(path: str) -> bool:
    return path.strip("/") == "" or path.strip("/").isdigit()


def _database(value: str) -> str | None:
    scheme = value.partition("://")[0].lower()
    if "://" not in value or scheme.partition("+")[0] not in ("sqlite", "postgresql"):
        return "not a database URL: write sqlite:///PATH (a file) or postgresql://USER@HOST:5432/DB"
    return None


def _http(value: str) -> str | None:
    parts = _url(value, ("http", "https"))
    if parts is None or not parts.hostname:
        return "not an HTTP URL: write http://HOST:PORT (https:// for TLS)"
    return None


def _prefix(value: str) -> str | None:
    if not _PREFIX.fullmatch(value):
        return "a prefix is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
    return None


def _config(value: str) -> str | None:
    return None if value.strip() else "empty: give the path of a domains.yaml"


def _directory(value: str) -> str | None:
    if is_object_url(value):
        try:
            ObjectUrl.parse(value)
        except ConfigError as exc:
            return str(exc).partition(": ")[2]
        return None
    return None if value.strip() else "empty: give the directory the WARC files go to (default archive)"


def _spool(value: str) -> str | None:
    if is_object_url(value):
        return "a local directory, where WARC files wait for their upload: not an object URL"
    return None if value.strip() else "empty: give the directory WARC files wait in (default archive-spool)"


_CHECKS: dict[str, Callable[[str], str | None]] = {
    "amqp_url": _amqp,
    "redis_url": _redis,
    "database_url": _database,
    "config_path": _config,
    "prefix": _prefix,
    "management_url": _http,
    "fetch_api_url": _http,
    "archive_dir": _directory,
    "archive_spool": _spool,
    "s3_endpoint_url": _http,
}
