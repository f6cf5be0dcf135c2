"""Never two DCGM exporters on one GPU by default: the first install decision (exporter.mode).

`cluster` uses the cluster's dcgm-exporter (gpuwatch deploys no exporter), `gpuwatch` deploys
gpuwatch's in its place, `auto` (the default) asks the cluster at install. The cluster-aware renders
go through Helm's own engine and Go client (helm-python-sdk ``Config.render``, what `helm install`
does) against a FAKE API server (tests/support/fake_kube_lookup.py: real HTTP, discovery and
list/get as the API server answers them) holding the GPU Operator's objects as it creates them
(NVIDIA/gpu-operator assets/state-dcgm-exporter/0800_daemonset.yaml: DaemonSet
nvidia-dcgm-exporter labelled app=nvidia-dcgm-exporter; CRD clusterpolicies.nvidia.com, ClusterPolicy
cluster-policy with spec.dcgmExporter.enabled) or dcgm-exporter's own chart's DaemonSet.
Offline (`helm template`, Argo CD) Helm's lookup returns nothing: auto refuses with one line.
"""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.fake_kube_lookup import FakeKube
from tests.support.helm_chart import CHART, Manifest, find, helm, render, render_raw

KUBE_SYSTEM = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}}
CRD = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
       "metadata": {"name": "clusterpolicies.nvidia.com"}}


def cluster_policy(dcgm_exporter: dict | None) -> dict:
    spec = {"operator": {"defaultRuntime": "containerd"}, "driver": {"enabled": True}}
    if dcgm_exporter is not None:
        spec["dcgmExporter"] = dcgm_exporter
    return {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "cluster-policy"},
            "spec": spec}


def daemonset(namespace: str, name: str, labels: dict) -> dict:
    return {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": name, "namespace": namespace,
            "labels": labels}, "spec": {"selector": {"matchLabels": labels},
                                        "template": {"metadata": {"labels": labels}}}}


OPERATOR_DCGM = daemonset("gpu-operator", "nvidia-dcgm-exporter", {"app": "nvidia-dcgm-exporter"})
CHART_DCGM = daemonset("monitoring", "dcgm-exporter", {
    "app.kubernetes.io/name": "dcgm-exporter", "app.kubernetes.io/instance": "dcgm-exporter",
    "app.kubernetes.io/component": "dcgm-exporter", "helm.sh/chart": "dcgm-exporter-4.8.1"})
DEVICE_PLUGIN = daemonset("gpu-operator", "nvidia-device-plugin-daemonset", {"app": "nvidia-device-plugin-daemonset"})

# name -> (objects in the cluster, whether a dcgm-exporter already runs there)
CLUSTERS = {
    "GPU Operator, dcgm-exporter on (its default)": ([CRD, cluster_policy({}), OPERATOR_DCGM, DEVICE_PLUGIN], True),
    "GPU Operator, dcgmExporter not set": ([CRD, cluster_policy(None), OPERATOR_DCGM], True),
    "GPU Operator, dcgm-exporter off": ([CRD, cluster_policy({"enabled": False}), DEVICE_PLUGIN], False),
    "dcgm-exporter's own chart, no operator": ([CHART_DCGM, DEVICE_PLUGIN], True),
    "no dcgm-exporter, no operator CRD": ([DEVICE_PLUGIN], False),
}


def install(objects: list[dict], values: dict | None = None, *, kinds: set[str] | None = None,
            upgrade: bool = False) -> tuple[list[Manifest], str]:
    """What `helm install` (or upgrade) renders against a cluster holding ``objects``, and NOTES."""
    with FakeKube([KUBE_SYSTEM, *objects], kinds=kinds) as kube, helm().Chart.load(CHART) as chart, \
            helm().Config(kube_apiserver=kube.url, kube_token="fake", namespace="gpuwatch") as config:
        rendered = config.render(chart, values or {}, name="gpuwatch", namespace="gpuwatch",
                                 is_install=not upgrade, is_upgrade=upgrade)
    docs = [Manifest(t, obj) for t, text in sorted(rendered.items()) if not t.endswith("NOTES.txt")
            for obj in yaml.safe_load_all(text) if obj]
    return docs, rendered["gpuwatch/templates/NOTES.txt"]


def exporters(docs: list[Manifest]) -> list[Manifest]:
    return [d for d in docs if d.component == "exporter"]


def dcgm_exporters_on_gpu_nodes(objects: list[dict], docs: list[Manifest]) -> int:
    """DaemonSets reading the GPUs through DCGM: the cluster's plus what the chart deploys."""
    cluster = sum(1 for o in objects if o in (OPERATOR_DCGM, CHART_DCGM))
    return cluster + sum(1 for d in docs if d.kind == "DaemonSet" and d.component == "exporter")


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_a_default_install_never_puts_two_dcgm_exporters_on_a_gpu(cluster):
    objects, has_dcgm_exporter = CLUSTERS[cluster]
    docs, notes = install(objects)
    assert dcgm_exporters_on_gpu_nodes(objects, docs) == 1
    assert bool(exporters(docs)) is not has_dcgm_exporter
    assert find(docs, "CronJob", "analyzer")  # ingest runs either way
    if has_dcgm_exporter:
        assert "GPU metrics: the cluster's dcgm-exporter (" in notes and "gpuwatch doctor --from" in notes
        assert "exporter.mode=gpuwatch" in notes  # how to switch, said where the decision is shown
    else:
        assert "Exporter (DaemonSet gpuwatch-exporter" in notes


def test_what_was_found_is_named():
    _, notes = install(CLUSTERS["GPU Operator, dcgm-exporter on (its default)"][0])
    assert "the GPU Operator's ClusterPolicy cluster-policy (spec.dcgmExporter.enabled)" in notes
    assert "DaemonSet gpu-operator/nvidia-dcgm-exporter" in notes
    _, notes = install([CHART_DCGM])
    assert "DaemonSet monitoring/dcgm-exporter" in notes


def test_a_cluster_without_the_operators_crd_installs():
    # a lookup of a kind the API server does not serve would fail the install: the CRD is asked first
    docs, _ = install([DEVICE_PLUGIN], kinds={"Namespace", "DaemonSet", "CustomResourceDefinition"})
    assert find(docs, "DaemonSet", "exporter")


def test_an_upgrade_is_not_fooled_by_gpuwatchs_own_exporter():
    ours = find(render({"exporter": {"mode": "gpuwatch"}}), "DaemonSet", "exporter")
    ours = {**ours, "metadata": {**ours["metadata"], "namespace": "gpuwatch"}}
    docs, _ = install([ours, DEVICE_PLUGIN], upgrade=True)
    assert find(docs, "DaemonSet", "exporter")


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_an_explicit_choice_is_kept(cluster):
    objects, has_dcgm_exporter = CLUSTERS[cluster]
    docs, _ = install(objects, {"exporter": {"mode": "cluster"}})
    assert exporters(docs) == []
    docs, notes = install(objects, {"exporter": {"mode": "gpuwatch"}})
    assert find(docs, "DaemonSet", "exporter")
    # chosen beside a running dcgm-exporter: said, with what to turn off
    assert ("WARNING: exporter.mode=gpuwatch while the cluster runs dcgm-exporter" in notes) is has_dcgm_exporter


def test_offline_auto_refuses_with_one_line_naming_both_choices():
    with pytest.raises(helm().HelmRenderError) as caught:
        render_raw({}, choose=False)
    line = re.search(r"exporter\.mode=auto cannot see the cluster[^\n]*", str(caught.value))[0]
    assert "exporter.mode=cluster" in line and "exporter.mode=gpuwatch" in line


def test_offline_choices_render():
    off = render({"exporter": {"mode": "cluster"}})
    assert exporters(off) == [] and find(off, "CronJob", "analyzer")
    assert not [d for d in off if d.kind == "Service" and d.name.endswith("-dcgm")]
    notes = render_raw({"exporter": {"mode": "cluster"}})["gpuwatch/templates/NOTES.txt"]
    assert "GPU metrics: the cluster's dcgm-exporter; gpuwatch deployed no exporter" in notes
    on = render({"exporter": {"mode": "gpuwatch"}})
    assert {d.kind for d in exporters(on)} >= {"DaemonSet", "Service", "ServiceMonitor", "NetworkPolicy"}
    assert exporters(render({"exporter": {"enabled": False}}, choose=False)) == []  # no decision needed


def test_the_mode_is_one_of_three():
    with pytest.raises(helm().HelmValuesError, match=re.escape("at '/exporter/mode': value must be one of 'auto', 'cluster', 'gpuwatch'")):
        render({"exporter": {"mode": "replace"}})
