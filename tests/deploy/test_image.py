"""The Dockerfile, read as text (no container engine runs here): its stages, COPY sources, user,
health check and secrets; and the scripts its stages run, run here the same way."""

from __future__ import annotations

import fnmatch
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from crawler.monitor import endpoint, readings
from crawler.monitor.metrics import Metrics

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "Dockerfile"
SECRETISH = re.compile(r"(?i)(pass|secret|token|key|credential)")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> dict[str, list[tuple[str, str]]]:
    """Each stage's instructions, by its name."""
    out: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for word, rest in instructions():
        if word == "FROM":
            current = []
            out[rest.split(" AS ")[1].strip()] = current
        current.append((word, rest))
    return out


def test_stages_and_targets() -> None:
    s = stages()
    assert list(s)[-1] == "runtime", "the default target (the last stage) is the plain worker"
    assert {"build", "base", "render", "demo-site", "runtime"} == set(s)
    for name, body in s.items():
        base = body[0][1].split(" AS ")[0]
        assert base in s or base.startswith("python:${PYTHON_VERSION}-slim"), name
    assert any("chromium" in rest for _, rest in s["render"])
    assert not any("chromium" in rest for name in ("base", "runtime") for _, rest in s[name])


def _ignored(path: str) -> bool:
    # .dockerignore: later patterns win; "!" re-includes.
    ignored = False
    for pattern in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate, pattern = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        if fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            ignored = not negate
    return ignored


def test_copy_sources_exist_and_are_in_the_build_context() -> None:
    s = stages()
    for name, body in s.items():
        for word, rest in body:
            if word != "COPY":
                continue
            args = shlex.split(rest)
            from_stage = next((a.split("=", 1)[1] for a in args if a.startswith("--from=")), None)
            sources = [a for a in args if not a.startswith("--")][:-1]
            if from_stage is not None:
                assert from_stage in s and list(s).index(from_stage) < list(s).index(name), rest
                continue
            for source in sources:
                assert (ROOT / source).exists(), f"{name}: COPY {source}"
                assert not _ignored(source.rstrip("/")), f"{name}: {source} is left out by .dockerignore"


def test_runs_as_a_non_root_user_with_a_health_check() -> None:
    s = stages()
    for name in ("runtime", "render", "demo-site"):
        chain, users = name, []
        while chain in s:  # follow FROM back through the stages; the last USER set wins
            users = [rest for word, rest in s[chain] if word == "USER"] + users
            chain = s[chain][0][1].split(" AS ")[0]
        assert users and users[-1].split(":")[0] not in ("root", "0"), name
    assert any(word == "HEALTHCHECK" and "CMD" in rest for word, rest in s["base"])


def test_no_secret_is_baked_in() -> None:
    for word, rest in instructions():
        if word in ("ENV", "ARG"):
            for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", rest) or [rest.split()[0]]:
                assert not SECRETISH.search(name), f"{word} {name}"


def test_the_health_check_command_reads_the_worker_healthz() -> None:
    healthcheck = next(rest for word, rest in instructions() if word == "HEALTHCHECK")
    command = shlex.split(healthcheck.split(" CMD ", 1)[1])
    assert command[0] == "python"
    metrics = Metrics(process=False)
    server = endpoint.serve(metrics.registry, 0, "127.0.0.1", lambda: readings.health(metrics))
    env = {**os.environ, "CRAWLER_HEALTH_URL": f"http://127.0.0.1:{server.port}/healthz"}
    try:
        assert subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True).returncode != 0
        metrics.beat(time.time())
        assert subprocess.run([sys.executable, *command[1:]], env=env, capture_output=True).returncode == 0
    finally:
        server.close()


@pytest.mark.timeout(300)
def test_the_image_install_scripts_build_and_install_a_working_wheel(tmp_path: Path) -> None:
    """scripts/build-wheel and scripts/install-wheel, as the build and base stages run them; the
    dependencies are borrowed from this environment instead of downloaded (--no-deps)."""
    run = [i for i in instructions() if i[0] == "RUN"]
    assert any("scripts/build-wheel /wheels" in rest for _, rest in run)
    assert any("install-wheel /opt/crawler /tmp/wheels" in rest for _, rest in run)
    env = {**os.environ, "PYTHON": sys.executable}
    wheels = tmp_path / "wheels"
    subprocess.run(["bash", ROOT / "scripts" / "build-wheel", wheels], check=True, env=env)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    # The venv sees this one's packages, but not its editable crawler (a path, not a site dir).
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        ["bash", ROOT / "scripts" / "install-wheel", venv, wheels, "--no-deps"], check=True, env=env
    )
    # The migration job's command, from the installed wheel (its migrations travel inside it).
    db = tmp_path / "crawl.db"
    result = subprocess.run(
        [venv / "bin" / "crawler", "db", "upgrade", "--config", ROOT / "config" / "domains.yaml"],
        env={**os.environ, "CRAWLER_DATABASE_URL": f"sqlite:///{db}"},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    where = subprocess.run(
        [venv / "bin" / "python", "-c", "import crawler; print(crawler.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,  # not the checkout, whose crawler/ would be found first
    )
    assert str(venv) in where.stdout, "the wheel's crawler, not the editable checkout, was run"
    # The web console's files travel inside the wheel too: crawler-api serves them from the package.
    installed = Path(where.stdout.strip()).parent / "api" / "console" / "static"
    assert {p.name for p in installed.iterdir()} >= {"index.html", "console.js", "console.css"}
