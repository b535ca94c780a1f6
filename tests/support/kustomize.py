"""A small kustomize for the tests: `kubectl kustomize` is not installed where they run.

It covers what deploy/k8s uses: resources (files and directories), namespace, labels, images,
configMapGenerator (files) and strategic-merge patches given by path, merging lists by `name`.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Resource = dict[str, Any]


def build(directory: Path, swap: dict[str, str] | None = None) -> list[Resource]:
    """The resources `kubectl kustomize directory` would print; `swap` replaces resource entries."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    out: list[Resource] = []
    for entry in kustomization.get("resources", []):
        entry = (swap or {}).get(entry, entry)
        path = (directory / entry).resolve()
        if path.is_dir():
            out += build(path)
        else:
            out += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for generator in kustomization.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text() for f in generator.get("files", [])}
        out.append(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data}
        )
    for patch in kustomization.get("patches", []):
        change = yaml.safe_load((directory / patch["path"]).read_text())
        targets = [r for r in out if _key(r) == _key(change)]
        assert targets, f"patch {patch['path']} matches no resource"
        for target in targets:
            _merge(target, change)
    for label in kustomization.get("labels", []):
        for resource in out:
            resource["metadata"].setdefault("labels", {}).update(label["pairs"])
    if "namespace" in kustomization:
        for resource in out:
            if resource["kind"] != "Namespace":
                resource["metadata"]["namespace"] = kustomization["namespace"]
    for image in kustomization.get("images", []):
        for container in containers(out):
            if container["image"] == image["name"]:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return out


def containers(resources: list[Resource]) -> list[dict[str, Any]]:
    """Every container of every workload (Deployment, Job) in `resources`."""
    found = []
    for resource in resources:
        pod = resource.get("spec", {}).get("template", {}).get("spec", {})
        found += pod.get("containers", []) + pod.get("initContainers", [])
    return found


def _key(resource: Resource) -> tuple[str, str]:
    return resource["kind"], resource["metadata"]["name"]


def _merge(into: dict[str, Any], change: dict[str, Any]) -> None:
    for key, value in change.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        elif (
            isinstance(value, list)
            and isinstance(into.get(key), list)
            and all(isinstance(v, dict) and "name" in v for v in value)
        ):
            by_name = {item.get("name"): item for item in into[key]}
            for item in value:
                if item["name"] in by_name:
                    _merge(by_name[item["name"]], item)
                else:
                    into[key].append(copy.deepcopy(item))
        else:
            into[key] = copy.deepcopy(value)


def _named(value: Any) -> bool:
    # Strategic merge keys containers, volumes, env and ports lists by `name`.
    return isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value)
