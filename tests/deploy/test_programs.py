"""The deployments against the programs they run: every command names an installed console script,
crawler-gateway's, crawler-api's and crawler-scheduler's flags parse with their real argument parsers,
their probes ask routes the programs really serve (and serve without a key), and every CRAWLER_*
variable set is one the code reads. The manifests are checked, not run: no container engine or cluster
here."""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import inspect
import io
import re
import tomllib
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiohttp import web
from redis.asyncio import Redis

from crawler.api import main as api_main
from crawler.api.app import create_app
from crawler.config import load_config
from crawler.gateway import cli as gateway_cli
from crawler.gateway.proxies import load_proxies
from crawler.gateway.server import Gateway
from crawler.monitor import endpoint
from crawler.names import Names
from crawler.scheduler import cli as scheduler_cli
from crawler.scheduler.metrics import SchedulerMetrics
from crawler.settings import Settings
from tests.deploy.test_compose import services
from tests.deploy.test_k8s import CORES_PER_CONTEXT, PYTHON_AND_DRIVER_MB
from tests.support import kustomize
from tests.support.kustomize import Resource

ROOT = Path(__file__).parents[2]
OVERLAY = ROOT / "deploy" / "k8s" / "overlays" / "example"
OPERATING = ROOT / "docs" / "operating.md"  # where the Kubernetes Secrets are created
RENDER_OVERLAY = ROOT / "deploy" / "k8s" / "overlays" / "render"
COMPOSE_DIR = ROOT / "deploy" / "compose"
SCRIPTS: set[str] = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"])
PARSERS: dict[str, Callable[[], argparse.ArgumentParser]] = {
    "crawler-gateway": gateway_cli.build_parser,
    "crawler-api": api_main.build_parser,
    "crawler-scheduler": scheduler_cli.build_parser,
}
# What crawler-scheduler needs: the broker, the pages table, domains.yaml (not Redis).
SCHEDULER_ENV = {"CRAWLER_AMQP_URL", "CRAWLER_DATABASE_URL", "CRAWLER_CONFIG"}


@dataclass
class Launch:
    """One way a deployment starts a program: its command, environment and probe paths."""

    where: str
    command: list[str]
    env: dict[str, str | None]  # None: the value comes from a Secret
    probes: dict[str, str] = field(default_factory=dict)  # kind -> HTTP path
    port: int | None = None  # the port the deployment expects it on (its HTTP or metrics port)


def k8s_launches(resources: list[Resource]) -> list[Launch]:
    found = []
    for resource in resources:
        if resource["kind"] not in ("Deployment", "Job"):
            continue
        for c in resource["spec"]["template"]["spec"]["containers"]:
            probes = {k: c[k]["httpGet"]["path"] for k in c if k.endswith("Probe") and "httpGet" in c[k]}
            ports = [p["containerPort"] for p in c.get("ports", [])]
            found.append(
                Launch(
                    f"k8s {resource['metadata']['name']}",
                    list(c.get("command", [])) + list(c["args"]),
                    {e["name"]: e.get("value") for e in c.get("env", [])},
                    probes,
                    ports[0] if ports else None,
                )
            )
    return found


def compose_launches(s: dict[str, Any]) -> list[Launch]:
    found = []
    for name, service in s.items():
        command = service.get("command") or []
        if not command or not command[0].startswith("crawler"):
            continue
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        # The image's HEALTHCHECK asks CRAWLER_HEALTH_URL: that is the compose service's probe.
        probes = {}
        ports = [int(p.rsplit(":", 1)[1]) for p in service.get("ports", [])]
        if "CRAWLER_HEALTH_URL" in env:
            url = re.fullmatch(r"\w+://[^/:]+(?::(\d+))?(/.*)", env["CRAWLER_HEALTH_URL"])
            assert url, f"compose {name}: CRAWLER_HEALTH_URL {env['CRAWLER_HEALTH_URL']}"
            probes["healthcheck"] = url.group(2)
            if not ports and url.group(1):  # published nowhere: the port its health check asks
                ports = [int(url.group(1))]
        found.append(Launch(f"compose {name}", list(command), dict(env), probes, ports[0] if ports else None))
    return found


def names_the_code_reads() -> set[str]:
    """Every CRAWLER_* string literal in crawler/ (what it can look up), and the Dockerfile's."""
    names = set(re.findall(r"CRAWLER_[A-Z0-9_]+", (ROOT / "Dockerfile").read_text()))
    for path in (ROOT / "crawler").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"CRAWLER_[A-Z0-9_]+", value):
                names.add(value)
    return names


@contextlib.asynccontextmanager
async def gateway_routes() -> AsyncIterator[set[str]]:
    """The paths crawler-gateway's aiohttp router serves (its app set up; Redis never reached)."""
    path = COMPOSE_DIR / "proxies.yaml"
    env = {name: "k" * 32 for name in proxies_env_names(path)}
    redis = Redis.from_url("redis://127.0.0.1:1/0")  # lazy: the routes checked need no Redis
    gateway = Gateway(redis, Names("deploytest"), str(path), env)
    runner = web.AppRunner(gateway.app())
    await runner.setup()
    try:
        yield {r.canonical for r in runner.app.router.resources()}
    finally:
        await runner.cleanup()
        await redis.aclose()


class _ReadyFleet:
    async def readiness(self) -> dict[str, str]:
        return {"rabbitmq": "ok", "redis": "ok", "database": "ok"}


class _Ready:
    fleet = _ReadyFleet()


def api_app() -> Any:
    app = create_app(Settings(), load_config(OVERLAY / "domains.yaml"), tokens=[], control=_Ready())  # type: ignore[arg-type]
    app.state.control = _Ready()  # what the lifespan would set; httpx's transport does not run it
    return app


def proxies_env_names(path: Path) -> set[str]:
    data = yaml.safe_load(path.read_text())
    names = {k["key_env"] for k in data.get("keys", [])}
    names |= {e[f] for e in data.get("exits", []) for f in ("username_env", "password_env") if f in e}
    return names


# -- the checks (each raises AssertionError, so a mutated copy can be shown to fail) -----------------


def check_command(launch: Launch) -> None:
    program = launch.command[0]
    assert program in SCRIPTS, f"{launch.where}: {program} is not in pyproject's [project.scripts]"
    if program not in PARSERS:
        return
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = PARSERS[program]().parse_args(launch.command[1:])
    except SystemExit:
        refused = f"{launch.where}: {program} refuses {launch.command[1:]}: {err.getvalue()}"
        raise AssertionError(refused) from None
    host, port = args.listen if program != "crawler-scheduler" else (args.metrics_addr, args.metrics_port)
    assert host == "0.0.0.0", f"{launch.where}: loopback is unreachable from outside the container"
    assert launch.port == port, f"{launch.where}: listens on {port}, exposes {launch.port}"


def check_env(launch: Launch, known: set[str]) -> None:
    program = launch.command[0]
    for name in launch.env:
        if name.startswith("CRAWLER_"):
            assert name in known, f"{launch.where}: the code never reads {name}"
    if program == "crawler-api":
        assert {"CRAWLER_API_TOKENS", "CRAWLER_API_TOKENS_FILE"} & set(launch.env), launch.where
    if program in ("crawler-api", "crawler-gateway"):
        assert "CRAWLER_REDIS_URL" in launch.env, launch.where
    if program == "crawler-scheduler":
        missing = SCHEDULER_ENV - set(launch.env)
        assert not missing, f"{launch.where}: lacks {sorted(missing)}"


async def check_probes(launch: Launch, gateway: set[str], api: Any, scheduler: str) -> None:
    program = launch.command[0]
    if program == "crawler-gateway":
        assert launch.probes, f"{launch.where}: no probe"
        for kind, path in launch.probes.items():
            assert path in gateway, f"{launch.where}: {kind} asks {path}, the gateway serves {gateway}"
        assert set(launch.probes.values()) & {"/healthz"}, f"{launch.where}: /healthz is not probed"
    elif program == "crawler-api":
        # The OpenAPI schema lists every route (the router is included, not flattened, in app.routes).
        paths = {p for p, ops in api.openapi()["paths"].items() if "get" in ops}
        for kind, path in launch.probes.items():
            assert path in paths, f"{launch.where}: {kind} asks {path}, not a route of crawler-api"
            # Probes carry no token: the path must answer without one.
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://t") as c:
                status = (await c.get(path)).status_code
            assert status == 200, f"{launch.where}: {kind} {path} answers {status} without a token"
        if launch.where.startswith("k8s"):
            assert launch.probes.get("livenessProbe") == "/v1/healthz", launch.where
            assert launch.probes.get("readinessProbe") == "/v1/readyz", launch.where
    elif program == "crawler-scheduler":
        assert launch.probes, f"{launch.where}: no probe"
        for kind, path in launch.probes.items():
            # /healthz answers 200 only there (a wrong path gets /metrics, also a 200).
            assert path == "/healthz", f"{launch.where}: {kind} asks {path}, not /healthz"
            assert _status(scheduler + path) == 200, f"{launch.where}: {kind} {path}"
        if launch.where.startswith("k8s"):
            assert launch.probes.get("livenessProbe") == "/healthz", launch.where


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            status: int = resp.status
            return status
    except urllib.error.HTTPError as exc:
        return exc.code


@contextlib.contextmanager
def scheduler_endpoint() -> Iterator[str]:
    """The base URL of crawler-scheduler's /metrics and /healthz, served as it serves them (healthy)."""
    server = endpoint.serve(SchedulerMetrics().registry, 0, "127.0.0.1", lambda: (True, "last pass 0s ago"))
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.close()


def all_launches() -> list[Launch]:
    # The render overlay's consumers come second: a mutation of "k8s crawler-consumer" hits the example's.
    overlays = kustomize.build(OVERLAY) + kustomize.build(RENDER_OVERLAY)
    return k8s_launches(overlays) + compose_launches(services())


async def check_all(launches: list[Launch]) -> None:
    known = names_the_code_reads()
    api = api_app()
    async with gateway_routes() as gateway:
        with scheduler_endpoint() as scheduler:
            for launch in launches:
                check_command(launch)
                check_env(launch, known)
                await check_probes(launch, gateway, api, scheduler)


# -- the tests ---------------------------------------------------------------------------------------


def test_the_programs_are_deployed_everywhere() -> None:
    programs = [(launch.where.split()[0], launch.command[0]) for launch in all_launches()]
    for where in ("k8s", "compose"):
        for program in ("crawler-gateway", "crawler-api", "crawler-scheduler"):
            assert (where, program) in programs, (where, program)
    wheres = {launch.where for launch in all_launches()}
    assert {"k8s crawler-gateway-render", "compose gateway-render"} <= wheres


async def test_every_launch_matches_the_program_it_runs() -> None:
    await check_all(all_launches())


def _launch(launches: list[Launch], where: str) -> Launch:
    return next(x for x in launches if x.where == where)


MUTATIONS: dict[str, Callable[[list[Launch]], None]] = {
    "unknown-script": lambda ls: _launch(ls, "k8s crawler-gateway").command.__setitem__(0, "crawler-gw"),
    "unknown-flag": lambda ls: _launch(ls, "k8s crawler-gateway").command.__setitem__(3, "--proxy-file"),
    "bad-listen": lambda ls: _launch(ls, "compose api").command.__setitem__(2, "0.0.0.0"),
    "wrong-port": lambda ls: setattr(_launch(ls, "k8s crawler-api"), "port", 8080),
    "old-api-probe": lambda ls: _launch(ls, "k8s crawler-api").probes.__setitem__(
        "livenessProbe", "/healthz"
    ),
    "gateway-probe": lambda ls: _launch(ls, "compose gateway").probes.__setitem__("healthcheck", "/health"),
    "misspelt-env": lambda ls: _launch(ls, "k8s crawler-api").env.update(
        {"CRAWLER_API_TOKEN_FILE": _launch(ls, "k8s crawler-api").env.pop("CRAWLER_API_TOKENS_FILE")}
    ),
    "render-unknown-flag": lambda ls: _launch(ls, "k8s crawler-gateway-render").command.__setitem__(
        3, "--render"
    ),
    "render-probe": lambda ls: _launch(ls, "k8s crawler-gateway-render").probes.__setitem__(
        "startupProbe", "/readyz"
    ),
    "render-no-redis": lambda ls: _launch(ls, "k8s crawler-gateway-render").env.__delitem__(
        "CRAWLER_REDIS_URL"
    ),
    # The host's port (8901) is not the one the gateway listens on in its container.
    "compose-render-port": lambda ls: setattr(_launch(ls, "compose gateway-render"), "port", 8901),
    "compose-render-probe": lambda ls: _launch(ls, "compose gateway-render").probes.__setitem__(
        "healthcheck", "/metricz"
    ),
    "scheduler-unknown-flag": lambda ls: _launch(ls, "k8s crawler-scheduler").command.__setitem__(
        1, "--port"
    ),
    "scheduler-wrong-port": lambda ls: setattr(_launch(ls, "k8s crawler-scheduler"), "port", 9410),
    "scheduler-probe": lambda ls: _launch(ls, "k8s crawler-scheduler").probes.__setitem__(
        "livenessProbe", "/metrics"
    ),
    "compose-scheduler-probe": lambda ls: _launch(ls, "compose scheduler").probes.__setitem__(
        "healthcheck", "/health"
    ),
    # Its health check asks the worker's port, where nothing listens in its container.
    "compose-scheduler-port": lambda ls: setattr(_launch(ls, "compose scheduler"), "port", 9410),
    "scheduler-no-database": lambda ls: _launch(ls, "compose scheduler").env.__delitem__(
        "CRAWLER_DATABASE_URL"
    ),
}


@pytest.mark.parametrize("mutation", sorted(MUTATIONS))
async def test_a_mutated_copy_fails(mutation: str) -> None:
    launches = copy.deepcopy(all_launches())
    MUTATIONS[mutation](launches)
    with pytest.raises(AssertionError):
        await check_all(launches)


def _secret_keys(doc: str, secret: str) -> set[str]:
    """The keys docs/operating.md's `kubectl create secret generic <secret>` command gives the Secret."""
    command = re.search(rf"create secret generic {secret} ((?:[^\n]*\\\n)*[^\n]*)", doc)
    assert command, secret
    return set(re.findall(r"--from-(?:literal|file)=([\w.-]+)=", command.group(1)))


def test_the_gateway_secret_has_every_variable_proxies_yaml_names() -> None:
    keys = _secret_keys(OPERATING.read_text(), "crawler-gateway")
    proxies = OVERLAY / "proxies.yaml"
    assert proxies_env_names(proxies) <= keys
    load_proxies(str(proxies), {k: "x" * 32 for k in keys})  # the file is valid with that environment
    consumer = kustomize.build(OVERLAY)
    env = next(c["env"] for c in kustomize.containers(consumer) if c["args"][0] == "crawler-consume")
    ref = next(e for e in env if e["name"] == "CRAWLER_FETCH_API_KEY")["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "crawler-gateway" and ref["key"] in proxies_env_names(proxies)
    url = next(e for e in env if e["name"] == "CRAWLER_FETCH_API_URL")["value"]
    assert url == "http://crawler-gateway:8900/fetch"  # the Service's name and port, and the route


def test_the_api_tokens_are_a_mounted_secret_file() -> None:
    assert _secret_keys(OPERATING.read_text(), "crawler-api") == {"tokens"}
    resources = kustomize.build(OVERLAY)
    pod = next(r for r in resources if r["kind"] == "Deployment" and r["metadata"]["name"] == "crawler-api")[
        "spec"
    ]["template"]["spec"]
    container = pod["containers"][0]
    path = next(e["value"] for e in container["env"] if e["name"] == "CRAWLER_API_TOKENS_FILE")
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume["secret"]["secretName"] == "crawler-api"
    assert {i["path"] for i in volume["secret"]["items"]} == {path.rsplit("/", 1)[1]}


def test_the_gateway_reads_proxies_yaml_from_its_mounted_configmap() -> None:
    resources = kustomize.build(OVERLAY)
    pod = next(
        r for r in resources if r["kind"] == "Deployment" and r["metadata"]["name"] == "crawler-gateway"
    )["spec"]["template"]["spec"]
    container = pod["containers"][0]
    path = gateway_cli.build_parser().parse_args(container["args"][1:]).proxies
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert "subPath" not in mount  # a subPath mount never sees an edit: no live reload
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = next(
        r
        for r in resources
        if r["kind"] == "ConfigMap" and r["metadata"]["name"] == volume["configMap"]["name"]
    )
    assert path.rsplit("/", 1)[1] in configmap["data"]
    # Compose: the same file name under the mounted deploy/compose directory.
    gateway = services()["gateway"]
    compose_path = gateway_cli.build_parser().parse_args(gateway["command"][1:]).proxies
    assert compose_path == "/etc/crawler/proxies.yaml" and (COMPOSE_DIR / "proxies.yaml").exists()
    load_proxies(
        str(COMPOSE_DIR / "proxies.yaml"),
        {k: "x" * 32 for k in proxies_env_names(COMPOSE_DIR / "proxies.yaml")},
    )
    assert set(gateway["environment"]) >= proxies_env_names(COMPOSE_DIR / "proxies.yaml")


# -- the rendering gateways ---------------------------------------------------------------------------


def _compose_proxies(service: dict[str, Any]) -> Path:
    """The host file behind the path the service's `--proxies` names, through its volume mounts."""
    path: str = gateway_cli.build_parser().parse_args(service["command"][1:]).proxies
    volumes: list[str] = service.get("volumes", [])
    for volume in volumes:
        source, target = volume.split(":")[:2]
        if path.startswith(target + "/"):
            return ROOT / "deploy" / source / path.removeprefix(target + "/")
    raise AssertionError(f"{path} is in no volume the service mounts")


def _renders(path: Path, keys: set[str]) -> bool:
    """Whether the gateway given this proxies.yaml renders (its `render:`), the file loaded as it starts."""
    assert proxies_env_names(path) <= keys, f"{path}: names variables the gateway is not given"
    return load_proxies(str(path), {k: "x" * 32 for k in keys}).config.render is not None


def _stage(target: str) -> str:
    dockerfile = (ROOT / "Dockerfile").read_text()
    return dockerfile.split(f" AS {target}\n", 1)[1].split("\nFROM ", 1)[0]


def test_the_rendering_gateway_reads_a_proxies_yaml_that_renders_from_its_configmap() -> None:
    resources = kustomize.build(RENDER_OVERLAY)
    deployment = next(r for r in resources if r["metadata"]["name"] == "crawler-gateway-render")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    path = gateway_cli.build_parser().parse_args(container["args"][1:]).proxies
    mount = next(m for m in container["volumeMounts"] if path.startswith(m["mountPath"] + "/"))
    assert "subPath" not in mount  # exits and keys are reloaded live
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = next(
        r
        for r in resources
        if r["kind"] == "ConfigMap" and r["metadata"]["name"] == volume["configMap"]["name"]
    )
    name = path.rsplit("/", 1)[1]
    assert configmap["data"][name] == (RENDER_OVERLAY / name).read_text()
    # With the variables docs/operating.md's `crawler-gateway` Secret gives it (envFrom), as it starts.
    assert container["envFrom"] == [{"secretRef": {"name": "crawler-gateway"}}]
    keys = _secret_keys(OPERATING.read_text(), "crawler-gateway")
    assert _renders(RENDER_OVERLAY / name, keys)
    # The plain gateway's file must not render: its image has no Chromium, and it would exit 2.
    assert not _renders(OVERLAY / "proxies.yaml", keys)


def test_the_render_overlays_consumers_reach_the_rendering_gateway() -> None:
    resources = kustomize.build(RENDER_OVERLAY)
    service = next(r for r in resources if r["kind"] == "Service")
    assert service["metadata"]["name"] == "crawler-gateway-render"
    deployment = next(r for r in resources if r["metadata"]["name"] == "crawler-gateway-render")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    port = next(p["port"] for p in service["spec"]["ports"] if p["targetPort"] == "http")
    consumer = next(c for c in kustomize.containers(resources) if c["args"][0] == "crawler-consume")
    env = {e["name"]: e for e in consumer["env"]}
    assert env["CRAWLER_FETCH_API_URL"]["value"] == f"http://{service['metadata']['name']}:{port}/fetch"
    ref = env["CRAWLER_FETCH_API_KEY"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "crawler-gateway"
    assert ref["key"] in proxies_env_names(RENDER_OVERLAY / "proxies.yaml")
    # Its domains need it: without a rendered domain the overlay would show nothing.
    config = load_config(RENDER_OVERLAY / "domains.yaml")
    assert any(rules.renders for rules in config.rules.values())


def test_the_compose_rendering_gateway_runs_the_render_target_with_a_proxies_yaml_that_renders() -> None:
    s = services()
    assert "chromium-headless-shell" in _stage("render") and "chromium" not in _stage("runtime")
    plain, render = s["gateway"], s["gateway-render"]
    assert render["profiles"] == ["render"]
    assert render["build"]["target"] == "render" and plain["build"]["target"] == "runtime"
    # One tag per target: with the same one, `--build` would leave whichever built last under it.
    assert render["image"] != plain["image"]
    assert _renders(_compose_proxies(render), set(render["environment"]))
    assert not _renders(_compose_proxies(plain), set(plain["environment"]))


def _mib(value: str) -> int:
    """A Docker size (binary units: 512m, 1536M, 1g) in MiB."""
    number, unit = re.fullmatch(r"(\d+)([mMgG])", value).groups()  # type: ignore[union-attr]
    return int(number) * (1024 if unit in "gG" else 1)


def test_the_compose_rendering_gateway_can_run_chromium_read_only() -> None:
    render = services()["gateway-render"]
    assert render["read_only"] is True and render["init"] is True  # init: PID 1 reaps Chromium's orphans
    # Docker mounts a tmpfs noexec unless told: the renderer runs the launchers it writes there.
    (tmp,) = render["tmpfs"]
    path, _, options = tmp.partition(":")
    flags = options.split(",")
    assert path == "/tmp" and "exec" in flags and "noexec" not in flags
    tmpfs = _mib(next(f for f in flags if f.startswith("size="))[5:])
    config = load_proxies(
        str(_compose_proxies(render)), {k: "x" * 32 for k in render["environment"]}
    ).config.render
    assert config is not None
    # Sized as the Kubernetes pod, from the same measured figures: the cores its contexts keep busy,
    # and every browser at max_rss_mb beside Python, the driver and a full tmpfs, which is memory
    # counted in the same limit.
    limit = render["deploy"]["resources"]["limits"]
    assert float(limit["cpus"]) >= CORES_PER_CONTEXT * config.browsers * config.contexts
    room = config.max_rss_mb * config.browsers + PYTHON_AND_DRIVER_MB + tmpfs
    assert _mib(limit["memory"]) >= room, (limit, room)
    # aiohttp's drain of open renders (its shutdown timeout), then the browsers' close.
    shutdown = inspect.signature(web.BaseRunner.__init__).parameters["shutdown_timeout"].default
    assert int(render["stop_grace_period"].removesuffix("s")) > shutdown


async def test_compose_consumers_reach_the_gateway_deploy_env_names() -> None:
    s = services()
    url = s["consumer"]["environment"]["CRAWLER_FETCH_API_URL"]
    match = re.fullmatch(r"http://\$\{FETCH_GATEWAY:-([\w-]+)\}:(\d+)(/\w+)", url)
    assert match, url
    default, port, route = match.group(1), int(match.group(2)), match.group(3)
    example = (COMPOSE_DIR / "env.example").read_text()
    assert re.findall(r"(?m)^FETCH_GATEWAY=([\w-]+)$", example) == [default]
    # Either gateway env.example offers is a service that listens on that port and serves that route.
    offered = set(re.findall(r"\b(gateway[\w-]*) \(`--profile", example))
    assert offered == {"gateway", "gateway-render"} and default in offered
    async with gateway_routes() as routes:
        assert route in routes
    for name in offered:
        command = s[name]["command"]
        assert command[0] == "crawler-gateway", name
        assert gateway_cli.build_parser().parse_args(command[1:]).listen[1] == port, name
