"""deploy/k8s: assembled like kustomize, every resource valid against Kubernetes' schemas (KEDA's
against deploy/schemas/keda.json), and the numbers the crawler's behaviour asks for."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from prometheus_client import CollectorRegistry

from crawler.config import load_config
from crawler.gateway.server import GatewayMetrics
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from tests.deploy.test_monitoring import metric_names
from tests.support import kustomize
from tests.support.kustomize import Resource

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"
KEDA_SCHEMA = ROOT / "deploy" / "schemas" / "keda.json"
OVERLAY = K8S / "overlays" / "example"
RABBITMQ = "../../autoscaling/rabbitmq"
PROMETHEUS = "../../autoscaling/prometheus"
KUBERNETES = "1.30.0"  # the oldest release still maintained when this was written
# The example overlay includes the gateway and the API; they are also built alone, as a fleet that
# adds them to an overlay of its own would.
VARIANTS = {
    "example-rabbitmq": lambda: kustomize.build(OVERLAY),
    "example-prometheus": lambda: kustomize.build(OVERLAY, swap={RABBITMQ: PROMETHEUS}),
    "gateway": lambda: kustomize.build(K8S / "gateway"),
    "api": lambda: kustomize.build(K8S / "api"),
}


def validate(resources: list[Resource], tmp_path: Path) -> None:
    """Raise if any resource breaks Kubernetes' schema (strict: unknown fields too) or KEDA's."""
    keda = [r for r in resources if r["apiVersion"].startswith("keda.sh/")]
    for resource in resources:
        if resource not in keda:
            kubernetes_validate.validate(resource, KUBERNETES, strict=True)
    for n, resource in enumerate(keda):
        path = tmp_path / f"keda-{n}.yaml"
        path.write_text(yaml.safe_dump(resource))
        result = subprocess.run(
            [Path(sys.executable).parent / "check-jsonschema", "--schemafile", KEDA_SCHEMA, path],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise AssertionError(result.stdout + result.stderr)


def find(resources: list[Resource], kind: str, name: str) -> Resource:
    return next(r for r in resources if r["kind"] == kind and r["metadata"]["name"] == name)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_resource_passes_its_schema(variant: str, tmp_path: Path) -> None:
    resources = VARIANTS[variant]()
    assert resources
    validate(resources, tmp_path)


def test_every_kustomization_names_files_that_exist() -> None:
    kustomizations = sorted(K8S.rglob("kustomization.yaml"))
    assert len(kustomizations) >= 5
    for path in kustomizations:
        data = yaml.safe_load(path.read_text())
        named = [*data.get("resources", []), *(p["path"] for p in data.get("patches", []))]
        named += [f for g in data.get("configMapGenerator", []) for f in g.get("files", [])]
        for entry in named:
            assert (path.parent / entry).exists(), f"{path}: {entry}"
    overlay = (OVERLAY / "kustomization.yaml").read_text()
    assert f"- {RABBITMQ}" in overlay and PROMETHEUS in overlay


@pytest.mark.parametrize(
    "break_it",
    [
        lambda r: r["kind"] == "Deployment" and r["spec"].__setitem__("replicas", "two"),
        lambda r: r["kind"] == "Deployment" and r["spec"]["template"]["spec"].__setitem__("gracePeriod", 60),
        lambda r: (
            r["kind"] == "ScaledObject" and r["spec"]["triggers"][0]["metadata"].__setitem__("value", 8000)
        ),
        lambda r: r["kind"] == "ScaledObject" and r["spec"].__setitem__("maxReplicas", 3),
    ],
    ids=["replicas-not-int", "unknown-pod-field", "keda-metadata-not-string", "keda-unknown-field"],
)
def test_a_broken_manifest_fails(break_it: Any, tmp_path: Path) -> None:
    resources = copy.deepcopy(VARIANTS["example-rabbitmq"]())
    assert any([break_it(r) is None for r in resources])  # the mutation applied somewhere
    with pytest.raises((kubernetes_validate.ValidationError, AssertionError)):
        validate(resources, tmp_path)


def test_secrets_are_referenced_never_included() -> None:
    for variant in VARIANTS.values():
        assert not [r for r in variant() if r["kind"] == "Secret"]
    text = "\n".join(p.read_text() for p in K8S.rglob("*.yaml"))
    # proxies.yaml names the variable holding a proxy's password (password_env), never the password.
    text = re.sub(r"password_env(: \w+)?", "", text.lower())
    assert "password" not in text.replace("user:password@", "")


def _consumer(resources: list[Resource]) -> dict[str, Any]:
    pod: dict[str, Any] = find(resources, "Deployment", "crawler-consumer")["spec"]["template"]["spec"]
    return pod


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_consumers_drain_within_their_termination_grace() -> None:
    resources = VARIANTS["example-rabbitmq"]()
    pod = _consumer(resources)
    args = pod["containers"][0]["args"]
    assert args[0] == "crawler-consume"
    config = load_config(OVERLAY / "domains.yaml")
    longest_fetch = max([config.defaults.timeout, *(d.timeout or 0 for d in config.domains.values())])
    assert pod["terminationGracePeriodSeconds"] > float(_option(args, "--grace")) + longest_fetch


def test_the_consumer_probes_ask_the_heartbeat_on_its_metrics_port() -> None:
    container = _consumer(VARIANTS["example-rabbitmq"]())["containers"][0]
    port = int(_option(container["args"], "--metrics-port"))
    assert {"name": "metrics", "containerPort": port} in container["ports"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}, probe


def test_every_container_has_requests_and_limits_and_runs_as_non_root() -> None:
    for name, variant in VARIANTS.items():
        resources = variant()
        for container in kustomize.containers(resources):
            assert set(container["resources"]) == {"requests", "limits"}, (name, container["name"])
        for workload in (r for r in resources if r["kind"] in ("Deployment", "Job")):
            assert workload["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] is True


def test_every_deployment_has_a_disruption_budget() -> None:
    for variant in VARIANTS.values():
        resources = variant()
        budgets = [
            r["spec"]["selector"]["matchLabels"] for r in resources if r["kind"] == "PodDisruptionBudget"
        ]
        for deployment in (r for r in resources if r["kind"] == "Deployment"):
            assert deployment["spec"]["selector"]["matchLabels"] in budgets


def test_domains_yaml_is_a_configmap_mounted_as_a_directory_for_live_reload() -> None:
    resources = VARIANTS["example-rabbitmq"]()
    configmap = find(resources, "ConfigMap", "crawler-domains")
    load_config(OVERLAY / "domains.yaml")  # the shipped example is a valid crawl configuration
    assert set(configmap["data"]) == {"domains.yaml"}
    for workload in (
        find(resources, "Deployment", "crawler-consumer"),
        find(resources, "Job", "crawler-migrate"),
        find(resources, "Deployment", "crawler-api"),
    ):
        pod = workload["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v.get("configMap"))
        assert volume["configMap"]["name"] == "crawler-domains"
        container = pod["containers"][0]
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        assert "subPath" not in mount  # a subPath mount never sees the ConfigMap change
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CRAWLER_CONFIG"] == f"{mount['mountPath']}/domains.yaml"


def test_the_migration_job_upgrades_the_database() -> None:
    job = find(VARIANTS["example-rabbitmq"](), "Job", "crawler-migrate")
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == ["crawler", "db", "upgrade"]


def test_the_rabbitmq_scaler_sums_exactly_the_domain_queues() -> None:
    scaled = find(VARIANTS["example-rabbitmq"](), "ScaledObject", "crawler-consumer")
    meta = scaled["spec"]["triggers"][0]["metadata"]
    assert (meta["protocol"], meta["operation"], meta["useRegex"], meta["mode"]) == (
        "http",
        "sum",
        "true",
        "QueueLength",
    )
    names = Names()
    pattern = re.compile(meta["queueName"])
    assert pattern.match(names.domain_queue("shop.example"))
    for other in (names.dead, names.unrouted, names.retry_queue(5), names.frontier):
        assert not pattern.match(other), other


def test_the_prometheus_scaler_reads_a_metric_the_consumers_export() -> None:
    scaled = find(VARIANTS["example-prometheus"](), "ScaledObject", "crawler-consumer")
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert metric_names(query) == {"crawler_frontier_messages_ready"} <= Metrics().exported_names()
    assert scaled["spec"]["minReplicaCount"] >= 1  # at 0 nothing would export the metric


def test_the_gateway_scaler_reads_a_metric_the_gateway_exports() -> None:
    scaled = find(VARIANTS["example-rabbitmq"](), "ScaledObject", "crawler-gateway")
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert metric_names(query) == {"crawler_gateway_inflight_requests"}
    assert metric_names(query) <= exported_names(GatewayMetrics().registry)
    assert scaled["spec"]["minReplicaCount"] >= 1  # at 0 nothing would export the metric
    pod = find(VARIANTS["example-rabbitmq"](), "Deployment", "crawler-gateway")["spec"]["template"]
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"  # KEDA reads Prometheus


def exported_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry's /metrics shows (with _total, _bucket, ... suffixes)."""
    names: set[str] = set()
    for family in registry.collect():
        names.update(sample.name for sample in family.samples)
        names.add(family.name)  # a labelled family with no child yet has no sample
    return names


def test_the_overlay_sets_namespace_and_image() -> None:
    resources = VARIANTS["example-rabbitmq"]()
    assert {r["metadata"].get("namespace") for r in resources if r["kind"] != "Namespace"} == {"crawler"}
    assert {c["image"] for c in kustomize.containers(resources)} == {"registry.example/crawler:0.1.0"}
    consumer = _consumer(resources)["containers"][0]
    assert consumer["resources"]["limits"]["memory"] == "1Gi"  # the overlay's patch applied
