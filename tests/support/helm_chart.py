"""Render helm/gpuwatch with Helm's own Go engine (helm-python-sdk, no helm binary, offline).

Used by tests/test_helm*.py. ``render(values)`` returns the manifests as parsed objects, each
tagged with the template it came from; ``find(docs, kind, component)`` picks one out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "gpuwatch"
ALL_ON = CHART / "ci" / "all-on-values.yaml"
RELEASE, NAMESPACE = "gpuwatch", "gpuwatch"


def helm():
    """The helm_python module, or a skip naming the missing dev dependency."""
    return pytest.importorskip("helm_python", reason="helm-python-sdk (dev extra) is not installed")


@dataclass(frozen=True)
class Manifest:
    template: str
    obj: dict

    @property
    def kind(self) -> str:
        return self.obj["kind"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    @property
    def component(self) -> str:
        return self.obj["metadata"].get("labels", {}).get("app.kubernetes.io/component", "")


def all_on_values() -> dict:
    return yaml.safe_load(ALL_ON.read_text())


# Offline (helm template) the chart cannot look at the cluster, so exporter.mode=auto refuses to
# render (tests/test_helm_exporter_mode.py): a render here states the choice a user of gpuwatch's
# exporter makes, unless the values make their own (or ``choose=False``).
OFFLINE_CHOICE = {"mode": "gpuwatch"}


def with_choice(values: dict | None) -> dict:
    values = dict(values or {})
    values["exporter"] = {**OFFLINE_CHOICE, **(values.get("exporter") or {})}
    return values


def render_raw(values: dict | None = None, *, name: str = RELEASE, namespace: str = NAMESPACE,
               choose: bool = True) -> dict[str, str]:
    """Template path -> rendered text (what `helm template` prints per file)."""
    with helm().Chart.load(CHART) as chart:
        return chart.render(with_choice(values) if choose else (values or {}), name=name, namespace=namespace)


def render(values: dict | None = None, **kwargs) -> list[Manifest]:  # kwargs: name, namespace, choose
    """Every object the chart renders for ``values`` (NOTES.txt and empty documents left out)."""
    out = []
    for template, text in sorted(render_raw(values, **kwargs).items()):
        if template.endswith("NOTES.txt"):
            continue
        out += [Manifest(template, obj) for obj in yaml.safe_load_all(text) if obj]
    return out


def find(docs: list[Manifest], kind: str, component: str) -> dict:
    """The one object of ``kind`` labelled with ``component`` (fails naming what was there)."""
    hits = [d.obj for d in docs if d.kind == kind and d.component == component]
    assert len(hits) == 1, f"expected one {kind} for {component}, got {[(d.kind, d.name) for d in docs]}"
    return hits[0]


def kinds(docs: list[Manifest]) -> set[tuple[str, str]]:
    return {(d.kind, d.component) for d in docs}


def container(pod_spec: dict, name: str) -> dict:
    every = pod_spec.get("initContainers", []) + pod_spec["containers"]
    hits = [c for c in every if c["name"] == name]
    assert hits, f"no container {name!r} in {[c['name'] for c in every]}"
    return hits[0]


def pod_spec(obj: dict) -> dict:
    """The pod template spec of a DaemonSet/Deployment/Job/CronJob."""
    if obj["kind"] == "CronJob":
        return obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return obj["spec"]["template"]["spec"]
