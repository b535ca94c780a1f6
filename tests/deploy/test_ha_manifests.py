"""deploy/k8s/ha, offline: assembled like kustomize, Kubernetes' resources against Kubernetes' schemas,
the RabbitmqCluster against a schema of the operator's fields (deploy/schemas/rabbitmqcluster.json),
its shape for quorum queues, the quorum frontier in domains.yaml, and the Secret docs/ha.md shows as
the crawler reads it."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from crawler.config import load_config
from crawler.failover import nodes
from crawler.sentinel import parse
from crawler.settings import Settings
from tests.deploy.test_k8s import find, validate
from tests.support import kustomize
from tests.support.kustomize import Resource

ROOT = Path(__file__).resolve().parents[2]
HA = ROOT / "deploy" / "k8s" / "ha"
SCHEMA = ROOT / "deploy" / "schemas" / "rabbitmqcluster.json"
SECRET_KEYS = {
    "amqp-url": "CRAWLER_AMQP_URL",
    "redis-url": "CRAWLER_REDIS_URL",
    "database-url": "CRAWLER_DATABASE_URL",
    "management-url": "CRAWLER_MANAGEMENT_URL",
}


def build() -> list[Resource]:
    return kustomize.build(HA)


def cluster(resources: list[Resource] | None = None) -> Resource:
    (found,) = [r for r in resources or build() if r["kind"] == "RabbitmqCluster"]
    return found


def check(resource: Resource, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(resource))
    command = [Path(sys.executable).parent / "check-jsonschema", "--schemafile", SCHEMA, path]
    return subprocess.run(command, capture_output=True, text=True)


def docs_secret() -> dict[str, str]:
    """The keys of `crawler-services` that docs/ha.md shows for this topology."""
    text = (ROOT / "docs" / "ha.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def test_every_kubernetes_resource_passes_its_schema(tmp_path: Path) -> None:
    resources = build()
    assert {r["metadata"].get("namespace") for r in resources if r["kind"] != "Namespace"} == {"crawler"}
    validate([r for r in resources if r["kind"] != "RabbitmqCluster"], tmp_path)


def test_the_rabbitmq_cluster_passes_its_schema_and_a_misspelt_field_does_not(tmp_path: Path) -> None:
    found = cluster()
    done = check(found, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = copy.deepcopy(found)
    broken["spec"]["replica"] = broken["spec"].pop("replicas")
    assert check(broken, tmp_path).returncode != 0
    broken = copy.deepcopy(found)
    broken["spec"]["replicas"] = "3"
    assert check(broken, tmp_path).returncode != 0


def test_three_nodes_one_per_machine_that_pause_in_a_minority() -> None:
    found = cluster()
    spec = found["spec"]
    assert spec["replicas"] == 3
    assert spec["persistence"]["storage"]
    assert set(spec["resources"]) == {"requests", "limits"}
    assert "cluster_partition_handling = pause_minority" in spec["rabbitmq"]["additionalConfig"]
    (rule,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert rule["topologyKey"] == "kubernetes.io/hostname"
    # The operator labels the cluster's pods app.kubernetes.io/name: <the RabbitmqCluster's name>.
    assert rule["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": found["metadata"]["name"]}


def test_a_drain_takes_one_rabbitmq_node_at_a_time() -> None:
    resources = build()
    name = cluster(resources)["metadata"]["name"]
    budget = find(resources, "PodDisruptionBudget", name)
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"] == {"matchLabels": {"app.kubernetes.io/name": name}}


def test_the_frontier_is_quorum_on_as_many_nodes_as_the_cluster_has() -> None:
    resources = build()
    configmap = find(resources, "ConfigMap", "crawler-domains")
    config = load_config(HA / "domains.yaml")  # a valid crawl configuration
    assert configmap["data"]["domains.yaml"] == (HA / "domains.yaml").read_text()
    spec = cluster(resources)["spec"]
    assert config.frontier.queue_type == "quorum"
    assert config.frontier.replicas == spec["replicas"]
    # The broker's consumer_timeout (ms) and domains.yaml's delivery_timeout (s) are set together.
    timeout = re.search(r"^\s*consumer_timeout\s*=\s*(\d+)\s*$", spec["rabbitmq"]["additionalConfig"], re.M)
    assert timeout and int(timeout[1]) == config.delivery_timeout * 1000


def test_every_crawler_container_reads_its_services_from_the_secret() -> None:
    resources = build()
    workloads = [r for r in resources if r["kind"] in ("Deployment", "Job")]
    assert {w["metadata"]["name"] for w in workloads} == {
        "crawler-consumer",
        "crawler-scheduler",
        "crawler-migrate",
    }
    wants = {
        "crawler-consumer": {"amqp-url", "redis-url", "database-url"},
        "crawler-scheduler": {"amqp-url", "database-url"},
        "crawler-migrate": {"database-url"},
    }
    for workload in workloads:
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        got = {
            e["valueFrom"]["secretKeyRef"]["key"]: e["name"]
            for e in container["env"]
            if e.get("valueFrom", {}).get("secretKeyRef", {}).get("name") == "crawler-services"
        }
        for key in wants[workload["metadata"]["name"]]:
            assert got.get(key) == SECRET_KEYS[key], (workload["metadata"]["name"], key)
    assert find(resources, "Deployment", "crawler-scheduler")["spec"]["replicas"] == 2


@pytest.mark.parametrize("key", sorted(SECRET_KEYS))
def test_the_secret_docs_ha_shows_holds_urls_the_crawler_accepts(key: str) -> None:
    value = docs_secret()[key]
    Settings.from_env({SECRET_KEYS[key]: value})  # a ConfigError if the crawler would refuse it
    name = cluster()["metadata"]["name"]
    if key == "amqp-url":
        # Every pod of the operator's StatefulSet <name>-server, by its name under the headless
        # Service <name>-nodes.
        hosts = [n.split("@")[1].split(":")[0] for n in nodes(value)]
        assert hosts == [f"{name}-server-{i}.{name}-nodes" for i in range(3)]
    if key == "management-url":
        assert value.split("@")[1].split(":")[0] == name  # the operator's Service over the pods
    if key == "redis-url":
        assert len(parse(value).sentinels) == 3


def test_every_deployment_has_a_disruption_budget_and_every_container_its_resources() -> None:
    resources = build()
    budgets = [r["spec"]["selector"]["matchLabels"] for r in resources if r["kind"] == "PodDisruptionBudget"]
    for deployment in (r for r in resources if r["kind"] == "Deployment"):
        assert deployment["spec"]["selector"]["matchLabels"] in budgets, deployment["metadata"]["name"]
    for container in kustomize.containers(resources):
        assert set(container["resources"]) == {"requests", "limits"}, container["name"]
        assert container["image"] == "registry.example/crawler:0.1.0"
