"""deploy/k8s: assembled like kustomize, every resource valid against Kubernetes' schemas (KEDA's
against deploy/schemas/keda.json), and the numbers the crawler's behaviour asks for."""

from __future__ import annotations

import copy
import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry

from crawler.config import load_config
from crawler.gateway.ask import MOST_TIMEOUT
from crawler.gateway.metrics import GatewayMetrics
from crawler.gateway.proxies import load_proxies
from crawler.gateway.render import RenderConfig
from crawler.gateway.render.metrics import RenderMetrics
from crawler.monitor.metrics import Metrics
from crawler.names import Names
from crawler.scheduler import cli as scheduler_cli
from tests.deploy.test_monitoring import metric_names
from tests.support import kustomize
from tests.support.kustomize import Resource

ROOT = Path(__file__).parents[2]
K8S = ROOT / "deploy" / "k8s"
KEDA_SCHEMA = ROOT / "deploy" / "schemas" / "keda.json"
OVERLAY = K8S / "overlays" / "example"
RENDER_OVERLAY = K8S / "overlays" / "render"
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
    "render": lambda: kustomize.build(RENDER_OVERLAY),
    "gateway-render": lambda: kustomize.build(K8S / "gateway-render"),
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
    assert len(kustomizations) >= 8
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


RENDER_BREAKS: dict[str, Any] = {
    # kubernetes-validate is strict: a misspelt emptyDir field fails, as the API server would refuse it.
    "tmp-unknown-field": lambda pod: next(v for v in pod["volumes"] if v["name"] == "tmp")["emptyDir"].update(
        {"size": "1Gi"}
    ),
    "share-pid-not-bool": lambda pod: pod.__setitem__("shareProcessNamespace", "yes"),
    "probe-unknown-field": lambda pod: pod["containers"][0]["startupProbe"].__setitem__("failures", 24),
}


@pytest.mark.parametrize("name", sorted(RENDER_BREAKS))
def test_a_broken_rendering_gateway_fails(name: str, tmp_path: Path) -> None:
    resources = copy.deepcopy(VARIANTS["render"]())
    RENDER_BREAKS[name](_pod(resources, "crawler-gateway-render"))
    with pytest.raises((kubernetes_validate.ValidationError, AssertionError)):
        validate(resources, tmp_path)


def test_secrets_are_referenced_never_included() -> None:
    for variant in VARIANTS.values():
        assert not [r for r in variant() if r["kind"] == "Secret"]
    text = "\n".join(p.read_text() for p in K8S.rglob("*.yaml"))
    # proxies.yaml names the variable holding a proxy's password (password_env), never the password.
    text = re.sub(r"password_env(: \w+)?", "", text.lower())
    assert "password" not in text.replace("user:password@", "")


def _pod(resources: list[Resource], deployment: str) -> dict[str, Any]:
    pod: dict[str, Any] = find(resources, "Deployment", deployment)["spec"]["template"]["spec"]
    return pod


def _consumer(resources: list[Resource]) -> dict[str, Any]:
    return _pod(resources, "crawler-consumer")


def _option(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


@pytest.mark.parametrize("overlay", [OVERLAY, RENDER_OVERLAY], ids=lambda p: p.name)
def test_the_consumers_drain_within_their_termination_grace(overlay: Path) -> None:
    resources = kustomize.build(overlay)
    pod = _consumer(resources)
    args = pod["containers"][0]["args"]
    assert args[0] == "crawler-consume"
    config = load_config(overlay / "domains.yaml")
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


@pytest.mark.parametrize("overlay", [OVERLAY, RENDER_OVERLAY], ids=lambda p: p.name)
def test_domains_yaml_is_a_configmap_mounted_as_a_directory_for_live_reload(overlay: Path) -> None:
    resources = kustomize.build(overlay)
    configmap = find(resources, "ConfigMap", "crawler-domains")
    load_config(overlay / "domains.yaml")  # the shipped example is a valid crawl configuration
    assert set(configmap["data"]) == {"domains.yaml"}
    # Every program but the gateways reads domains.yaml.
    readers = [
        r for r in resources if r["kind"] in ("Deployment", "Job") and "gateway" not in r["metadata"]["name"]
    ]
    expected = {"crawler-consumer", "crawler-scheduler", "crawler-migrate"}
    expected |= {"crawler-api"} if overlay == OVERLAY else set()
    assert {r["metadata"]["name"] for r in readers} == expected
    for workload in readers:
        pod = workload["spec"]["template"]["spec"]
        volume = next(v for v in pod["volumes"] if v.get("configMap"))
        assert volume["configMap"]["name"] == "crawler-domains"
        container = pod["containers"][0]
        mount = next(m for m in container["volumeMounts"] if m["name"] == volume["name"])
        assert "subPath" not in mount  # a subPath mount never sees the ConfigMap change
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["CRAWLER_CONFIG"] == f"{mount['mountPath']}/domains.yaml"


@pytest.mark.parametrize("overlay", [OVERLAY, RENDER_OVERLAY], ids=lambda p: p.name)
def test_one_scheduler_runs_with_the_consumers_services_and_is_scraped(overlay: Path) -> None:
    resources = kustomize.build(overlay)
    deployment = find(resources, "Deployment", "crawler-scheduler")
    assert deployment["spec"]["replicas"] == 1
    template = deployment["spec"]["template"]
    pod = template["spec"]
    (container,) = pod["containers"]
    assert container["args"][0] == "crawler-scheduler"
    args = scheduler_cli.build_parser().parse_args(container["args"][1:])
    # Scraped as the consumers are: the annotations on the port its metrics are served on.
    assert {"name": "metrics", "containerPort": args.metrics_port} in container["ports"]
    assert args.metrics_addr == "0.0.0.0"
    annotations = template["metadata"]["annotations"]
    assert annotations == _consumer_template(resources)["metadata"]["annotations"] | {
        "prometheus.io/port": str(args.metrics_port)
    }
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    # The consumers' queues, pages table and domains.yaml: the same values, from the same Secret.
    consumer_env = {e["name"]: e for e in _consumer(resources)["containers"][0]["env"]}
    env = {e["name"]: e for e in container["env"]}
    assert set(env) == {"CRAWLER_AMQP_URL", "CRAWLER_DATABASE_URL", "CRAWLER_CONFIG"}
    assert all(env[name] == consumer_env[name] for name in env), env
    # A rolling update starts the new pod first (two for a moment are safe); a drain is never held
    # back by the budget of a single replica.
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    budget = next(
        r
        for r in resources
        if r["kind"] == "PodDisruptionBudget"
        and r["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    )
    assert budget["spec"]["maxUnavailable"] >= 1 and "minAvailable" not in budget["spec"]


def _consumer_template(resources: list[Resource]) -> dict[str, Any]:
    template: dict[str, Any] = find(resources, "Deployment", "crawler-consumer")["spec"]["template"]
    return template


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
    assert pattern.match(names.first_band("shop.example"))  # a quorum frontier's first band
    for other in (names.dead, names.unrouted, names.retry_queue(5), names.frontier):
        assert not pattern.match(other), other


def test_the_prometheus_scaler_reads_a_metric_the_consumers_export() -> None:
    scaled = find(VARIANTS["example-prometheus"](), "ScaledObject", "crawler-consumer")
    query = scaled["spec"]["triggers"][0]["metadata"]["query"]
    assert metric_names(query) == {"crawler_frontier_messages_ready"} <= exported_names(Metrics().registry)
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


def test_the_render_overlay_sets_namespace_and_the_render_image_on_the_rendering_gateway_only() -> None:
    resources = VARIANTS["render"]()
    assert {r["metadata"].get("namespace") for r in resources if r["kind"] != "Namespace"} == {"crawler"}
    images = {c["name"] + " " + c["image"] for c in kustomize.containers(resources)}
    assert images == {
        "consumer registry.example/crawler:0.1.0",
        "scheduler registry.example/crawler:0.1.0",
        "migrate registry.example/crawler:0.1.0",
        "gateway registry.example/crawler:0.1.0-render",
    }
    # The unmapped name stays distinct from the plain image's: kustomize maps an image by its name,
    # whatever its tag, so `crawler:render` would be given the plain image's tag.
    alone = kustomize.containers(VARIANTS["gateway-render"]())
    assert [c["image"] for c in alone] == ["crawler-render"]
    # The Dockerfile's target that has Chromium.
    dockerfile = (ROOT / "Dockerfile").read_text()
    stage = dockerfile.split(" AS render\n", 1)[1].split("\nFROM ", 1)[0]
    assert "chromium-headless-shell" in stage


def _render_config(resources: list[Resource]) -> RenderConfig:
    """The `render:` of the proxies.yaml the rendering gateway mounts (its ConfigMap), loaded."""
    pod = _pod(resources, "crawler-gateway-render")
    volume = next(v for v in pod["volumes"] if v["name"] == "proxies")
    data = find(resources, "ConfigMap", volume["configMap"]["name"])["data"]
    text = data["proxies.yaml"]
    path = RENDER_OVERLAY / "proxies.yaml"
    assert path.read_text() == text
    names = set(re.findall(r"\w+_env: (\w+)", text))
    render = load_proxies(str(path), {n: "k" * 32 for n in names}).config.render
    assert render is not None, "the rendering gateway's proxies.yaml has no `render:`"
    return render


def _cpu(value: str) -> float:
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _mib(value: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "M": 1e6 / 2**20, "G": 1e9 / 2**20}
    unit = next(u for u in sorted(units, key=len, reverse=True) if value.endswith(u))
    return float(value.removesuffix(unit)) * units[unit]


# Measured for issue #15 (the gateway's whole process tree): one browser with 4 contexts sustained
# ~7 renders/s on ~1.8 cores (~270 CPU-ms a render); peak PSS ~600 MB with 1 browser, ~730 MB with 2.
CORES_PER_CONTEXT = 1.8 / 4
PEAK_PSS_MB = {1: 600, 2: 730}
PYTHON_AND_DRIVER_MB = 256  # beside the browsers: the gateway's Python and Playwright's Node.js


def _peak_mib(browsers: int) -> float:
    extra = PEAK_PSS_MB[2] - PEAK_PSS_MB[1]  # each further browser, extrapolated past 2
    return (PEAK_PSS_MB[1] + extra * (browsers - 1)) * 1e6 / 2**20


def test_the_rendering_gateway_is_sized_from_the_measured_figures() -> None:
    resources = VARIANTS["render"]()
    render = _render_config(resources)
    container = _pod(resources, "crawler-gateway-render")["containers"][0]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    cores = CORES_PER_CONTEXT * render.browsers * render.contexts
    assert _cpu(limits["cpu"]) >= _cpu(requests["cpu"]) >= cores * 0.99, (requests, limits, cores)
    assert _mib(requests["memory"]) >= _peak_mib(render.browsers), requests
    # A browser is replaced only once past max_rss_mb and idle: the limit must hold every browser at
    # that size beside the rest, or the kernel kills the gateway first.
    room = render.max_rss_mb * render.browsers + PYTHON_AND_DRIVER_MB
    assert _mib(limits["memory"]) >= room, (limits, room)


def test_the_rendering_gateway_has_a_writable_tmp_and_nothing_else() -> None:
    pod = _pod(VARIANTS["render"](), "crawler-gateway-render")
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
    # The renderer's launchers, Playwright's profiles and Chromium's shared memory files
    # (--disable-dev-shm-usage) all go to tempfile's directory: /tmp, no TMPDIR being set.
    assert [m["mountPath"] for m in writable] == ["/tmp"]
    assert "TMPDIR" not in {e["name"] for e in container.get("env", [])}
    assert "emptyDir" in volumes[writable[0]["name"]]
    # PID 1 must reap Chromium's orphans, and Python does not.
    assert pod["shareProcessNamespace"] is True


def test_the_rendering_gateway_outlasts_its_drain_and_its_browser_launch() -> None:
    resources = VARIANTS["render"]()
    pod = _pod(resources, "crawler-gateway-render")
    # crawler-gateway's runner keeps aiohttp's shutdown timeout: open requests get that long on SIGTERM,
    # a render at most its `timeout` (capped by the gateway), then the browsers are closed.
    shutdown = inspect.signature(web.BaseRunner.__init__).parameters["shutdown_timeout"].default
    drain = min(float(shutdown), MOST_TIMEOUT)
    config = load_config(RENDER_OVERLAY / "domains.yaml")
    rendered = [r.timeout for r in config.rules.values() if r.renders]
    assert rendered, "the render overlay's domains.yaml renders no domain"
    assert pod["terminationGracePeriodSeconds"] > max([drain, *rendered])
    # Liveness waits for the startup probe, which must cover the browsers' launch (concurrent, each
    # within launch_timeout) before the port opens.
    startup = pod["containers"][0]["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] > _render_config(resources).launch_timeout


def test_the_render_scaler_reads_a_metric_only_a_rendering_gateway_exports() -> None:
    resources = VARIANTS["render"]()
    scaled = find(resources, "ScaledObject", "crawler-gateway-render")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "crawler-gateway-render"
    meta = scaled["spec"]["triggers"][0]["metadata"]
    names = metric_names(meta["query"])
    registry = CollectorRegistry()
    RenderMetrics(registry)
    assert names and names <= exported_names(registry)
    # ../gateway's replicas, scraped by the same Prometheus, must not add to it.
    assert not names & exported_names(GatewayMetrics().registry)
    # Busy contexts cannot pass browsers x contexts per replica: a threshold at or above it would
    # never add a replica, however long pages wait for a context.
    render = _render_config(resources)
    assert 0 < float(meta["threshold"]) < render.browsers * render.contexts
    assert scaled["spec"]["minReplicaCount"] >= 1  # at 0 nothing would export the metric
    template = find(resources, "Deployment", "crawler-gateway-render")["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
