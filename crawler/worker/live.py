"""The running configuration and what is compiled from it: an edit of domains.yaml swaps them together."""

from __future__ import annotations

from crawler.config import CrawlConfig, Rules
from crawler.frontier.scope import Scope
from crawler.parse.extract import Fields, compile_fields
from crawler.quality.checks import Expectations

_FILE = "~file"  # never a domain: a name has no "~"


class LiveConfig:
    """What every part of a consumer reads the configuration through, so a reload reaches them all."""

    def __init__(self, config: CrawlConfig) -> None:
        self.scope = Scope(config)
        self._fields = _compiled(config)
        self._expectations = _expected(config)

    @property
    def config(self) -> CrawlConfig:
        """The configuration in force."""
        return self.scope.config

    def rules(self, domain: str | None) -> Rules:
        """The rules in force for `domain` (the defaults for a host of no configured domain)."""
        return self.scope.config.rules_for(domain)

    def fields(self, domain: str) -> Fields:
        """The domain's compiled extraction fields."""
        key = self._shared(domain)
        fields = self._fields.get(key)
        if fields is None:
            fields = self._fields[key] = compile_fields(self.rules(domain).extract)
        return fields

    def expectations(self, domain: str) -> Expectations:
        """The domain's compiled expectations (docs/quality.md): every extracted page is checked."""
        key = self._shared(domain)
        found = self._expectations.get(key)
        if found is None:
            found = self._expectations[key] = expectations_of(self.rules(domain))
        return found

    def _shared(self, domain: str) -> str:
        """What is compiled for `domain` is kept under: its own name if it has a queue; else one
        shared by the domains file's (their template) or by every other host (the host template)."""
        config = self.scope.config
        if domain in config.rules:
            return domain
        return _FILE if domain in config.layout_domains else ""

    def swap(self, config: CrawlConfig) -> None:
        """Put `config` in force; what is compiled from it is compiled first: a failure changes nothing."""
        fields = _compiled(config)
        expected = _expected(config)
        self.scope.config = config
        self._fields = fields
        self._expectations = expected


def expectations_of(rules: Rules) -> Expectations:
    """A domain's expectations: its `expect:` section, and the fill rate of each of its `extract` fields."""
    return Expectations(rules.expect, rules.extract)


def _compiled(config: CrawlConfig) -> dict[str, Fields]:
    return {d: compile_fields(config.rules_for(d).extract) for d in config.domains}


def _expected(config: CrawlConfig) -> dict[str, Expectations]:
    return {d: expectations_of(config.rules_for(d)) for d in config.domains}
