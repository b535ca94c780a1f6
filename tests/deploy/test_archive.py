"""The WARC archive's shared volume in the deployments: compose's named volume, Kubernetes'
ReadWriteMany claim, each mounted where CRAWLER_ARCHIVE_DIR points in every process that writes or
reads the archive; the image's mount point owned by the crawler's uid; the reparse Job example valid;
and no shipped domains.yaml archiving by default. Checked, not run: no container engine here."""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from crawler import cli
from crawler.config import load_config
from tests.deploy.test_compose import services
from tests.deploy.test_image import stages
from tests.deploy.test_k8s import KUBERNETES, OVERLAY, RENDER_OVERLAY, find, validate
from tests.support import kustomize
from tests.support.kustomize import Resource

ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
REPARSE_JOB = DEPLOY / "k8s" / "archive" / "reparse-job.yaml"
CLAIM = "crawler-archive"
UID = 10001  # the image's user (Dockerfile), which every pod runs as
# What compose runs `crawler-consume` (writes the archive) and `crawler reparse` (reads it) in.
COMPOSE_ARCHIVISTS = ("consumer", "cli")
SHIPPED_CONFIGS = [
    ROOT / "config" / "domains.yaml",
    DEPLOY / "compose" / "domains.yaml",
    OVERLAY / "domains.yaml",
    RENDER_OVERLAY / "domains.yaml",
]


# -- compose -----------------------------------------------------------------------------------------


def check_compose(s: dict[str, Any], top_volumes: dict[str, Any]) -> None:
    for name in COMPOSE_ARCHIVISTS:
        service = s[name]
        directory = service["environment"].get("CRAWLER_ARCHIVE_DIR")
        assert directory, f"compose {name}: no CRAWLER_ARCHIVE_DIR"
        mounts = [v.split(":") for v in service.get("volumes", [])]
        sources = [source for source, target, *_ in mounts if target == directory]
        assert sources, f"compose {name}: nothing is mounted at {directory}"
        (source,) = sources
        # A named volume (declared at the top level), not a bind mount of a host path: one Docker
        # host's replicas share it, and compose creates it owned as the image's mount point is.
        assert not source.startswith((".", "/")), f"compose {name}: {source} is a bind mount"
        assert source in top_volumes, f"compose {name}: volume {source} is not declared"
        assert not any(opt == "ro" for _, target, *opts in mounts if target == directory for opt in opts)
    # Every archivist sees the same volume at the same place.
    seen = {(s[n]["environment"]["CRAWLER_ARCHIVE_DIR"], _source(s[n])) for n in COMPOSE_ARCHIVISTS}
    assert len(seen) == 1, seen


def _source(service: dict[str, Any]) -> str:
    directory = service["environment"]["CRAWLER_ARCHIVE_DIR"]
    return str(next(v.split(":")[0] for v in service["volumes"] if v.split(":")[1] == directory))


def _compose() -> tuple[dict[str, Any], dict[str, Any]]:
    data = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return data["services"], data["volumes"]


def test_compose_gives_the_consumers_and_the_cli_one_named_archive_volume() -> None:
    check_compose(*_compose())
    s = services()
    # The consumers keep domains.yaml's mount beside it (a service's `volumes` replaces the anchor's).
    for name in COMPOSE_ARCHIVISTS:
        assert "./compose:/etc/crawler:ro" in s[name]["volumes"], name
        assert s[name]["environment"]["CRAWLER_CONFIG"] == "/etc/crawler/domains.yaml", name


COMPOSE_BREAKS = {
    "no-env": lambda s, v: s["consumer"]["environment"].pop("CRAWLER_ARCHIVE_DIR"),
    "elsewhere": lambda s, v: s["cli"]["environment"].__setitem__("CRAWLER_ARCHIVE_DIR", "/app/archive"),
    "bind-mount": lambda s, v: s["consumer"]["volumes"].__setitem__(1, "./archive:/var/lib/crawler/archive"),
    "undeclared": lambda s, v: v.pop("archive"),
    "read-only": lambda s, v: s["consumer"]["volumes"].__setitem__(1, "archive:/var/lib/crawler/archive:ro"),
}


@pytest.mark.parametrize("name", sorted(COMPOSE_BREAKS))
def test_a_broken_compose_archive_fails(name: str) -> None:
    s, volumes = copy.deepcopy(_compose())
    COMPOSE_BREAKS[name](s, volumes)
    with pytest.raises(AssertionError):
        check_compose(s, volumes)


def test_the_image_owns_the_archive_mount_point() -> None:
    """A new named volume takes the owner of the image's directory it is mounted on: without it the
    volume's root would be root's, and uid 10001 could not write."""
    directory = _archive_dir()
    runs = " ".join(rest for word, rest in stages()["base"] if word == "RUN")
    made = re.search(r"install -d -o (\d+) -g (\d+)[^&]*", runs)
    assert made, "the base stage makes no directory with an owner"
    assert (int(made.group(1)), int(made.group(2))) == (UID, UID)
    assert directory in made.group(0).split(), (directory, made.group(0))
    user = [rest for word, rest in stages()["base"] if word == "USER"]
    assert user[-1] == f"{UID}:{UID}"


def _archive_dir() -> str:
    directory: str = services()["consumer"]["environment"]["CRAWLER_ARCHIVE_DIR"]
    return directory


# -- Kubernetes --------------------------------------------------------------------------------------


def check_pod(pod: dict[str, Any], where: str, *, writes: bool) -> str:
    """The archive directory of a pod's first container: CRAWLER_ARCHIVE_DIR, the claim mounted there."""
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    directory = env.get("CRAWLER_ARCHIVE_DIR")
    assert directory, f"{where}: no CRAWLER_ARCHIVE_DIR"
    mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"] == directory]
    assert len(mounts) == 1, f"{where}: {len(mounts)} mounts at {directory}"
    (mount,) = mounts
    assert "subPath" not in mount, where
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    assert volume.get("persistentVolumeClaim", {}).get("claimName") == CLAIM, f"{where}: {volume}"
    if writes:
        assert not mount.get("readOnly") and not volume["persistentVolumeClaim"].get("readOnly"), where
    return str(directory)


def check_claim(resources: list[Resource]) -> None:
    claim = find(resources, "PersistentVolumeClaim", CLAIM)
    # Every consumer pod writes its own files at once, from any node: ReadWriteMany.
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], claim["spec"]["accessModes"]
    assert claim["spec"]["resources"]["requests"]["storage"]


def check_fleet(resources: list[Resource]) -> None:
    check_claim(resources)
    pod = find(resources, "Deployment", "crawler-consumer")["spec"]["template"]["spec"]
    check_pod(pod, "k8s crawler-consumer", writes=True)
    assert pod["securityContext"]["fsGroup"] == UID


def test_the_example_fleet_mounts_a_read_write_many_claim_in_every_consumer(tmp_path: Path) -> None:
    resources = kustomize.build(OVERLAY)
    check_fleet(resources)
    validate(resources, tmp_path)
    # The claim is the only one: no other workload asks for storage of its own.
    claims = [r for r in resources if r["kind"] == "PersistentVolumeClaim"]
    assert [c["metadata"]["name"] for c in claims] == [CLAIM]
    assert claims[0]["metadata"]["namespace"] == "crawler"


K8S_BREAKS = {
    "read-write-once": lambda rs: find(rs, "PersistentVolumeClaim", CLAIM)["spec"].__setitem__(
        "accessModes", ["ReadWriteOnce"]
    ),
    "mounted-elsewhere": lambda rs: _consumer(rs)["containers"][0]["volumeMounts"][-1].__setitem__(
        "mountPath", "/archive"
    ),
    "read-only": lambda rs: _consumer(rs)["containers"][0]["volumeMounts"][-1].__setitem__("readOnly", True),
    "other-claim": lambda rs: _consumer(rs)["volumes"][-1]["persistentVolumeClaim"].__setitem__(
        "claimName", "archive"
    ),
}


def _consumer(resources: list[Resource]) -> dict[str, Any]:
    pod: dict[str, Any] = find(resources, "Deployment", "crawler-consumer")["spec"]["template"]["spec"]
    return pod


@pytest.mark.parametrize("name", sorted(K8S_BREAKS))
def test_a_broken_archive_volume_fails(name: str) -> None:
    resources = copy.deepcopy(kustomize.build(OVERLAY))
    K8S_BREAKS[name](resources)
    with pytest.raises(AssertionError):
        check_fleet(resources)


def _job() -> Resource:
    (job,) = [doc for doc in yaml.safe_load_all(REPARSE_JOB.read_text()) if doc]
    return dict(job)


def test_the_reparse_job_example_reads_the_consumers_archive_with_their_services() -> None:
    job = _job()
    kubernetes_validate.validate(job, KUBERNETES, strict=True)
    assert "generateName" in job["metadata"] and "name" not in job["metadata"]  # `kubectl create` again
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"  # a killed pod starts again and resumes the run
    assert pod["securityContext"]["runAsNonRoot"] is True
    directory = check_pod(pod, "reparse-job.yaml", writes=False)
    resources = kustomize.build(OVERLAY)
    consumer = _consumer(resources)
    assert directory == check_pod(consumer, "k8s crawler-consumer", writes=True)
    container = pod["containers"][0]
    assert set(container["resources"]) == {"requests", "limits"}
    # Its namespace and image are the overlay's (it is applied by hand, outside kustomize).
    assert job["metadata"]["namespace"] == find(resources, "Namespace", "crawler")["metadata"]["name"]
    assert container["image"] == consumer["containers"][0]["image"]
    # The consumers' values for what it shares with them: domains.yaml, the rows, the broker, Redis.
    theirs = {e["name"]: e for e in consumer["containers"][0]["env"]}
    for env in container["env"]:
        if env["name"] != "CRAWLER_ARCHIVE_DIR":
            assert env == theirs[env["name"]], env["name"]
    wanted = {"CRAWLER_CONFIG", "CRAWLER_DATABASE_URL", "CRAWLER_AMQP_URL", "CRAWLER_REDIS_URL"}
    assert wanted <= {e["name"] for e in container["env"]}
    domains = next(v for v in pod["volumes"] if v.get("configMap"))
    assert domains["configMap"]["name"] == "crawler-domains"
    # A process per core: as many workers as the cores it may use.
    args = container["args"]
    assert args[:2] == ["crawler", "reparse"]
    assert float(args[args.index("--workers") + 1]) == float(container["resources"]["limits"]["cpu"])
    assert load_config(OVERLAY / "domains.yaml").domain_of(args[args.index("--domain") + 1])


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def test_the_reparse_job_example_parses_with_crawler_reparse() -> None:
    reparse = _subcommands(cli.build_parser()).get("reparse")
    if reparse is None:
        pytest.skip("`crawler reparse` is not in crawler's parser yet")
    args = _job()["spec"]["template"]["spec"]["containers"][0]["args"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            cli.build_parser().parse_args(args[1:])
    except SystemExit:
        raise AssertionError(f"crawler refuses {args[1:]}: {err.getvalue()}") from None


# -- domains.yaml ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SHIPPED_CONFIGS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_shipped_configuration_archives_by_default(path: Path) -> None:
    config = load_config(path)
    assert not any(rules.archive for rules in config.rules.values()), path
