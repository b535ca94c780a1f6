"""deploy/compose.yaml: valid against the compose specification's schema (vendored in
check-jsonschema), and consistent with the crawler it runs. Not brought up: no container engine here."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from crawler.config import load_config
from tests.support.wait import until

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
# Off by default, each needing something of yours (proxies; tokens); documented in docs/operating.md.
OPTIONAL = {"gateway": "gateway", "gateway-render": "render", "api": "api"}


def check_compose(path: Path) -> subprocess.CompletedProcess[str]:
    """check-jsonschema with the compose specification's schema it ships."""
    tool = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run(
        [tool, "--builtin-schema", "vendor.compose-spec", path], capture_output=True, text=True
    )


def services() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data["services"]  # anchors and merge keys resolved by the YAML loader


def test_the_compose_file_passes_the_compose_schema() -> None:
    result = check_compose(COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("where", "broken_by"),
    [
        ("stop_grace_period: 60s", "stop_grace_period: 60s\n    restart_policy: x"),
        # In gateway-render: a key compose does not have, and a resource limit misspelt.
        ("stop_grace_period: 90s", "stop_grace_period: 90s\n    shm: 1g"),
        ('limits: {cpus: "2", memory: 1536M}', 'limits: {cpu: "2", memory: 1536M}'),
    ],
    ids=["consumer-unknown-key", "render-unknown-key", "render-bad-limit"],
)
def test_a_broken_compose_file_fails(where: str, broken_by: str, tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    text = COMPOSE.read_text()
    assert text.count(where) == 1, where
    broken.write_text(text.replace(where, broken_by))
    assert check_compose(broken).returncode != 0


def test_the_stack_has_what_the_issue_lists() -> None:
    s = services()
    assert {"rabbitmq", "redis", "postgres", "migrate", "consumer", "seed", "prometheus", "grafana"} <= set(s)
    assert {"gateway", "gateway-render", "api"} <= set(s)
    assert "management" in s["rabbitmq"]["image"]
    assert "--appendonly" in s["redis"]["command"] and "yes" in s["redis"]["command"]
    assert s["consumer"]["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert s["migrate"]["command"] == ["crawler", "db", "upgrade"]


def test_one_scheduler_runs_by_default_after_the_migration() -> None:
    scheduler = services()["scheduler"]
    assert scheduler["command"][0] == "crawler-scheduler"
    assert "profiles" not in scheduler and scheduler.get("deploy", {}).get("replicas", 1) == 1
    assert scheduler["depends_on"]["migrate"] == {"condition": "service_completed_successfully"}
    assert scheduler["restart"] == "unless-stopped"


def test_the_gateway_and_the_api_are_behind_documented_profiles() -> None:
    s = services()
    doc = (ROOT / "docs" / "operating.md").read_text()
    for name, profile in OPTIONAL.items():
        assert s[name]["profiles"] == [profile], name
        assert f"--profile {profile}" in doc, profile
    for service in s.values():
        command = service.get("command") or []
        if command and command[0].startswith("crawler"):
            assert shutil.which(command[0], path=str(Path(sys.executable).parent)), command[0]


def test_consumers_get_longer_to_stop_than_their_drain() -> None:
    consumer = services()["consumer"]
    grace = float(consumer["command"][consumer["command"].index("--grace") + 1])
    config = load_config(DEPLOY / "compose" / "domains.yaml")
    longest_fetch = max([config.defaults.timeout, *(d.timeout or 0 for d in config.domains.values())])
    stop = int(re.fullmatch(r"(\d+)s", consumer["stop_grace_period"]).group(1))  # type: ignore[union-attr]
    assert stop > grace + longest_fetch


def test_no_password_is_written_in_the_file() -> None:
    text = COMPOSE.read_text()
    for match in re.finditer(r"(?im)^\s*\w*(PASS(WORD)?|KEY)\w*:\s*(\S+)", text):
        assert match.group(3).startswith("${"), match.group(0)
    for url in re.findall(r"\w+://[^\s]+", text):
        if "@" in url:
            assert "${" in url.split("@")[0], url


def test_mounted_files_exist() -> None:
    for name, service in services().items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source}"


def test_the_crawl_is_the_demo_shops() -> None:
    config = load_config(DEPLOY / "compose" / "domains.yaml")
    s = services()
    shops = {a for n in ("shop", "books", "games") for a in s[n]["networks"]["default"]["aliases"]}
    assert shops == set(config.domains)
    seeds = {url.split("//")[1].split(":")[0] for url in s["seed"]["command"][2:]}
    assert seeds == shops


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_a_demo_shop_serves_alone_as_its_container_runs_it() -> None:
    command = services()["books"]["command"]
    assert command[:3] == ["python", "-m", "demo"]
    port = _free_port()
    args = [a if a != "0.0.0.0" else "127.0.0.1" for a in command[3:]]
    proc = subprocess.Popen([sys.executable, "-m", "demo", *args, "--port", str(port)], cwd=ROOT)
    try:
        body = await until(lambda: _get(f"http://127.0.0.1:{port}/"), within=10, what="the shop")
        assert "books.test home" in body
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            text: str = resp.read().decode()
            return text
    except OSError:
        return None


@pytest.mark.parametrize("name", ["datasources/prometheus.yml", "dashboards/crawler.yml"])
def test_grafana_provisioning_parses(name: str) -> None:
    assert yaml.safe_load((DEPLOY / "grafana" / "provisioning" / name).read_text())["apiVersion"] == 1
