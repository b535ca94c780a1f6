"""deploy/k8s/ha, offline: the RabbitmqCluster against a schema of the operator's fields, its shape for
quorum queues, and the example Secret's URLs as the crawler reads them."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawler.failover import nodes
from crawler.sentinel import parse
from crawler.settings import Settings
from tests.support import kustomize

ROOT = Path(__file__).resolve().parents[2]
HA = ROOT / "deploy" / "k8s" / "ha"
SCHEMA = ROOT / "deploy" / "schemas" / "rabbitmqcluster.json"


def cluster() -> dict[str, Any]:
    resources = kustomize.build(HA)
    (found,) = [r for r in resources if r["kind"] == "RabbitmqCluster"]
    return found


def check(resource: dict[str, Any], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(resource))
    command = [Path(sys.executable).parent / "check-jsonschema", "--schemafile", SCHEMA, path]
    return subprocess.run(command, capture_output=True, text=True)


def test_the_rabbitmq_cluster_passes_its_schema_and_a_misspelt_field_does_not(tmp_path: Path) -> None:
    found = cluster()
    assert found["metadata"]["namespace"] == "crawler"
    done = check(found, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    broken = copy.deepcopy(found)
    broken["spec"]["replica"] = broken["spec"].pop("replicas")
    assert check(broken, tmp_path).returncode != 0


def test_three_nodes_one_per_machine_that_pause_in_a_minority() -> None:
    spec = cluster()["spec"]
    assert spec["replicas"] == 3
    assert "cluster_partition_handling = pause_minority" in spec["rabbitmq"]["additionalConfig"]
    (rule,) = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert rule["topologyKey"] == "kubernetes.io/hostname"
    assert rule["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": cluster()["metadata"]["name"]}


@pytest.mark.parametrize("key", ["amqp-url", "redis-url", "database-url", "management-url"])
def test_the_secret_docs_ha_shows_holds_urls_the_crawler_accepts(key: str) -> None:
    text = (ROOT / "docs" / "ha.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    secret = {"stringData": yaml.safe_load(block)}
    env_names = {
        "amqp-url": "CRAWLER_AMQP_URL",
        "redis-url": "CRAWLER_REDIS_URL",
        "database-url": "CRAWLER_DATABASE_URL",
        "management-url": "CRAWLER_MANAGEMENT_URL",
    }
    value = secret["stringData"][key]
    Settings.from_env({env_names[key]: value})  # a ConfigError if the crawler would refuse it
    name = cluster()["metadata"]["name"]
    if key == "amqp-url":
        assert [n.split("@")[1].split(".")[0] for n in nodes(value)] == [
            f"{name}-server-{i}" for i in range(3)
        ]
    if key == "redis-url":
        assert len(parse(value).sentinels) == 3
