"""domains.yaml read and validated, its errors said by file and line; and the configuration a
program runs: the file's, with the environment's overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from crawler.config.checks import nested_pair
from crawler.config.model import CrawlConfig, DedupConfig
from crawler.errors import ConfigError
from crawler.hosts.listing import read_domains_file
from crawler.openweb import describe
from crawler.quality.expect import unknown_key


def _format_errors(path: str, text: str, exc: ValidationError) -> str:
    """One line: each error as `file:line: key.path: what is wrong`, the line that of its key."""
    try:
        root: yaml.Node | None = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        root = None
    return "; ".join(f"{path}{_line_of(root, err['loc'])}: {_describe(err)}" for err in exc.errors())


def _describe(err: ErrorDetails) -> str:
    # A mistyped key in `expect:` is answered with the key meant (`regex`: did you mean 'pattern'?).
    loc = err["loc"]
    if err["type"] == "extra_forbidden" and "expect" in loc[:-1]:
        return f"{'.'.join(str(p) for p in loc)}: {unknown_key(str(loc[-1]))}"
    return describe(err)


def _line_of(node: yaml.Node | None, loc: tuple[int | str, ...]) -> str:
    """`:N`, the line of the key at `loc` (or of the deepest part of it found), or "" if none is."""
    line = ""
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            found = next(((k, v) for k, v in node.value if str(k.value) == str(part)), None)
            if found is None:
                break
            line, node = f":{found[0].start_mark.line + 1}", found[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = f":{node.start_mark.line + 1}"
        else:
            break
    return line


def parse_config(text: str, source: str = "<config>", base: Path | None = None) -> CrawlConfig:
    """Validate YAML text as a crawl config, its domains file read from `base` (default: the current
    folder); raise ConfigError naming the key path and the rule."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}{yaml_error(exc)}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(raw).__name__}")
    try:
        config = CrawlConfig.model_validate(raw)
        return _with_domains_file(config, raw, base or Path())
    except ValidationError as exc:
        raise ConfigError(_format_errors(source, text, exc)) from None


def _with_domains_file(config: CrawlConfig, raw: dict[str, Any], base: Path) -> CrawlConfig:
    """`config` with its domains file's domains listed: each with a queue of its own while every
    listed domain fits under frontier.max_domain_queues, else all served by the host layout."""
    spec = config.domains_file
    if spec is None:
        return config
    path = base / spec.path
    listed = read_domains_file(path)
    twice = next((d for d in listed if d in config.domains), None)
    if twice is not None:
        raise ConfigError(f"{path}:{listed[twice]}: {twice!r} is listed under `domains:` too; list it once")
    pair = nested_pair([*config.domains, *listed])
    if pair is not None:
        inner, outer = pair
        line = listed[inner] if inner in listed else listed[outer]
        raise ConfigError(
            f"{path}:{line}: {inner!r} lies inside {outer!r}; a host must belong to one domain, so "
            "list only one of them"
        )
    if len(config.domains) + len(listed) > config.frontier.max_domain_queues:
        return _webhooks_known(config.with_layout(frozenset(listed)), path)
    # The template's one instance for every domain, kept as it is: their rules are merged once.
    domains = {**(raw.get("domains") or {}), **dict.fromkeys(listed, spec.template)}
    return _webhooks_known(CrawlConfig.model_validate({**raw, "domains": domains}), path)


def _webhooks_known(config: CrawlConfig, path: Path) -> CrawlConfig:
    """`config`, if each webhook's `domains:` names domains it lists (the file's included)."""
    for i in range(len(config.webhooks)):
        unknown = config.webhook_strangers(i)
        if unknown is not None:
            raise ConfigError(f"{path}: {unknown}")
    return config


def yaml_error(exc: yaml.YAMLError) -> str:
    """A YAML error in one line after its file's name: `:line:column: not valid YAML: the problem`."""
    mark = getattr(exc, "problem_mark", None)
    where = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    return f"{where}: not valid YAML: {problem}{f' ({context})' if context else ''}"


def with_dedup_mode(config: CrawlConfig, mode: str | None, source: str = "CRAWLER_DEDUP") -> CrawlConfig:
    """`config` with its dedup mode set to `mode` (from the environment, overriding the file), if any."""
    if not mode:
        return config
    try:
        dedup = DedupConfig.model_validate({**config.dedup.model_dump(), "mode": mode.strip().lower()})
    except ValidationError as exc:
        # One setting, one line: the file's own errors list a line per key instead.
        why = "; ".join(e["msg"] for e in exc.errors())
        raise ConfigError(f"{source}={mode!r}: {why}") from None
    return config.model_copy(update={"dedup": dedup})


def load_config(path: str | Path) -> CrawlConfig:
    """Read and validate domains.yaml."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the config ({exc.strerror}); pass --config or set CRAWLER_CONFIG"
        ) from None
    return parse_config(text, str(path), Path(path).parent)


class Sources(Protocol):
    """Where a program's configuration is found: its Settings, read from the environment."""

    @property
    def config_path(self) -> str: ...

    @property
    def dedup(self) -> str | None: ...


def load_effective(settings: Sources) -> CrawlConfig:
    """The configuration a program runs, read once when it starts: domains.yaml with the
    environment's dedup mode (CRAWLER_DEDUP) over the file's."""
    return with_dedup_mode(load_config(settings.config_path), settings.dedup)
