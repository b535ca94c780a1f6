"""deploy/: the Prometheus config and alert rules pass promtool; the dashboard uses exported metrics."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from crawler.monitor.metrics import Metrics
from crawler.monitor.readings import exported_names
from crawler.quality.metrics import CoverageMetrics
from crawler.scheduler import cli as scheduler_cli
from crawler.scheduler.metrics import SchedulerMetrics
from tests.deploy.test_compose import services
from tests.support import promtool

DEPLOY = Path(__file__).parents[2] / "deploy"
PROMETHEUS = DEPLOY / "prometheus"
DASHBOARDS = sorted((DEPLOY / "grafana").glob("*.json"))
# Series Prometheus makes itself, not the crawler.
PROMETHEUS_OWN = {"up"}


def crawler_metrics() -> set[str]:
    """What the workers and crawler-scheduler export, and the field coverage gauges (#47) that the
    process reading a crawl's coverage is to export: the dashboard and the rules may use these."""
    coverage = CollectorRegistry()
    CoverageMetrics(coverage)
    return (
        exported_names(Metrics().registry)
        | exported_names(SchedulerMetrics().registry)
        | exported_names(coverage)
    )


_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan",
}  # fmt: skip
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and labels left out)."""
    text = _STRINGS.sub('""', expr)
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "", text)  # Grafana variables
    text = re.sub(r"\{[^}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", "", text)  # ranges and subqueries
    text = _GROUPING.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        before = text[: match.start()]
        if rest.startswith("(") or match.group().lower() in _KEYWORDS:
            continue
        if before and (before[-1].isdigit() or before[-1] == "."):
            continue  # the exponent or unit of a number, e.g. 1e3
        names.add(match.group())
    return names


def test_metric_names_are_found_in_promql() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (le, domain) (rate(crawler_fetch_duration_seconds_bucket"
        '{domain=~"$domain", kind="a b"}[$__rate_interval]))) / on (x) group_left up '
        "and time() - crawler_heartbeat_timestamp_seconds offset 5m > 1e3"
    )
    assert metric_names(expr) == {
        "crawler_fetch_duration_seconds_bucket",
        "up",
        "crawler_heartbeat_timestamp_seconds",
    }


def _dashboard_exprs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            elif key in ("definition", "query") and isinstance(value, str):
                # A template variable's query: label_values(metric, label) and friends.
                match = re.match(r"\s*(?:label_values|query_result)\((.*)\)\s*$", value, re.S)
                if match:
                    yield match.group(1).rsplit(",", 1)[0] if "label_values" in value else match.group(1)
                elif value and key == "query" and node.get("type") != "datasource":
                    yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_parses_and_uses_only_exported_metrics(path: Path) -> None:
    dashboard = json.loads(path.read_text())
    exprs = list(_dashboard_exprs(dashboard))
    used = set().union(*(metric_names(e) for e in exprs))
    exported = crawler_metrics()
    assert used, "no PromQL found in the dashboard"
    assert used <= exported, f"exported by neither a worker nor the scheduler: {sorted(used - exported)}"
    # What the issue asks to see at a glance.
    for needed in (
        "crawler_queue_messages_ready",
        "crawler_pages_total",
        "crawler_errors_total",
        "crawler_dedup_hits_total",
        "crawler_dedup_misses_total",
        "crawler_heartbeat_timestamp_seconds",
        "crawler_due_pages",
        "crawler_due_oldest_seconds",
    ):
        assert needed in used, needed
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_there_is_a_dashboard() -> None:
    assert DASHBOARDS


def _rules() -> list[dict[str, Any]]:
    data = yaml.safe_load((PROMETHEUS / "alerts.yml").read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def test_alert_rules_use_only_exported_metrics() -> None:
    exported = crawler_metrics() | PROMETHEUS_OWN
    for rule in _rules():
        used = metric_names(rule["expr"])
        assert used, rule["alert"]
        assert used <= exported, f"{rule['alert']}: {sorted(used - exported)}"


def test_the_alerts_the_issue_asks_for_exist() -> None:
    names = {rule["alert"] for rule in _rules()}
    assert {
        "CrawlerQueueGrowing",
        "CrawlerErrorRateHigh",
        "CrawlerWorkerSilent",
        "CrawlerWorkerDown",
        "CrawlerDeadQueueGrowing",
        "CrawlerCreditBurnHigh",
        "CrawlerRecrawlBacklogGrowing",
        "CrawlerSchedulerDown",
        "CrawlerFieldCoverageLow",
    } <= names


def test_the_recrawl_backlog_alert_counts_each_domain_once() -> None:
    # Every scheduler replica exports the whole backlog: a plain sum would count it once per replica.
    rule = next(r for r in _rules() if r["alert"] == "CrawlerRecrawlBacklogGrowing")
    expr = rule["expr"]
    assert expr.count("crawler_due_pages") == expr.count("max by (domain) (crawler_due_pages)") > 0, expr


def test_the_gateways_are_scraped() -> None:
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    files = jobs["crawler-gateway"]["file_sd_configs"][0]["files"]
    assert any(Path(PROMETHEUS, f).match(pattern) for f in ("targets/gateway.json",) for pattern in files)
    assert (PROMETHEUS / "targets" / "gateway.json").exists()


def _jobs(config: str) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load((PROMETHEUS / config).read_text())
    return {job["job_name"]: job for job in data["scrape_configs"]}


def test_the_schedulers_are_scraped() -> None:
    files = _jobs("prometheus.yml")["crawler-scheduler"]["file_sd_configs"][0]["files"]
    assert any(Path("targets/scheduler.json").match(pattern) for pattern in files)
    targets = json.loads((PROMETHEUS / "targets" / "scheduler.json").read_text())
    assert targets and all(t["targets"] for t in targets)
    # Compose: the service's name on its network, on the port its command serves metrics on.
    (sd,) = _jobs("compose.yml")["crawler-scheduler"]["dns_sd_configs"]
    s = services()
    for name in sd["names"]:
        command = s[name]["command"]
        assert command[0] == "crawler-scheduler", name
        assert scheduler_cli.build_parser().parse_args(command[1:]).metrics_port == sd["port"], name


@pytest.mark.parametrize("config", ["prometheus.yml", "compose.yml"])
def test_every_job_an_alert_names_is_scraped(config: str) -> None:
    jobs = _jobs(config)
    for rule in _rules():
        for job in re.findall(r'job="([^"]+)"', rule["expr"]):
            assert job in jobs, f"{rule['alert']}: {config} has no job {job}"


def test_promtool_checks_the_scrape_config_and_its_rules() -> None:
    result = promtool.run("check", "config", "prometheus.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr, result.stdout + result.stderr


def test_promtool_checks_the_alert_rules() -> None:
    result = promtool.run("check", "rules", "alerts.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_each_alert_fires_in_its_promtool_unit_test() -> None:
    result = promtool.run("test", "rules", "alerts.test.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    tested = set(re.findall(r"alertname: (\w+)", (PROMETHEUS / "alerts.test.yml").read_text()))
    assert tested == {rule["alert"] for rule in _rules()}


def test_promtool_checks_the_compose_scrape_config() -> None:
    result = promtool.run("check", "config", "compose.yml", cwd=PROMETHEUS)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNING" not in result.stdout + result.stderr, result.stdout + result.stderr
