"""Pod UID and pod labels on the exporter's series (``--kubernetes-enable-pod-uid/-labels``).

The Kubernetes API is a FAKE API server (tests/support/fake_kube.py: real HTTP on 127.0.0.1, a
stand-in for the API server at its boundary) read by gpuwatch's own standard-library client
(sources/kube_pods.ApiServer); GPUs and the kubelet's allocations are the simulated fleet's, through
the real collector. Checked: the pod's uid and allow-listed labels follow its own labels on every
series attributed to it, never replacing one; unattributed series get none; an API failure keeps
serving the series without them and says so (``gpuwatch_source_up{source="kubernetes"} 0``); the
CLI refuses the flags without a node name, in one line.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys

from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import ExporterCollector
from gpuwatch.exporter.exposition import render
from gpuwatch.fleet import DEFAULT_START, build_fleet
from gpuwatch.sources.kube_pods import ApiServer, PodMetadata
from gpuwatch.sources.simulate import SimulatedSource, allocations_at
from tests.support.fake_kube import FakeKube, pod

T = DEFAULT_START + 2.5 * 86400 + 1234.0
NODE = "gpu-node-001"


def _scrape(kube_url: str, *, labels: bool, uid: bool, allowlist: str | None = None) -> str:
    fleet = build_fleet(gpus=40, seed=0)
    source = SimulatedSource(fleet, node=NODE)
    allocations = allocations_at(fleet, source.fleet_time(T), node=NODE)
    meta = PodMetadata(ApiServer(kube_url), node=NODE, labels=labels, allowlist=allowlist, timeout_s=2.0)
    collector = ExporterCollector(source, allocations=lambda: allocations, clock=lambda: T,
                                  options=dataclasses.replace(compat.options("dcgm-exporter-4.8"), pod_uid=uid),
                                  pods=meta.get)
    return render(collector.collect()).decode()


def _fleet_pods() -> list:
    fleet = build_fleet(gpus=40, seed=0)
    source = SimulatedSource(fleet, node=NODE)
    return sorted({(a.namespace, a.pod) for a in allocations_at(fleet, source.fleet_time(T), node=NODE)})


def test_uid_and_labels_follow_the_pods_own_labels():
    pods = _fleet_pods()
    assert pods
    with FakeKube() as kube:
        for ns, name in pods:
            kube.add(pod(ns, name, node=NODE, labels={"app.kubernetes.io/name": name, "pod": "evil", "team": ns}))
        kube.add(pod("other", "elsewhere", node="gpu-node-009", labels={"team": "x"}))
        text = _scrape(kube.url, labels=True, uid=True, allowlist="^app\\.kubernetes\\.io/,^pod$")
    util = [x for x in text.splitlines() if x.startswith("DCGM_FI_DEV_POWER_USAGE{")]
    attributed = [x for x in util if 'pod="' in x]
    assert attributed
    for line in attributed:
        name = re.search(r'[{,]pod="([^"]+)"', line)[1]
        assert f'pod_uid="uid-pods-{name}"' in line and f'app_kubernetes_io_name="{name}"' in line
        assert line.index('container="') < line.index("pod_uid=") < line.index("app_kubernetes_io_name=")
        assert 'team="' not in line and line.count('pod="') == 1, "allow-list applied; own labels win"
    assert all("pod_uid=" not in x for x in util if 'pod="' not in x)
    assert 'gpuwatch_source_up{source="kubernetes"} 1' in text


def test_an_unreachable_api_keeps_serving_the_series_without_them():
    with FakeKube() as kube:
        url = kube.url
    text = _scrape(url, labels=True, uid=True)  # the server is gone: connection refused
    assert 'gpuwatch_source_up{source="kubernetes"} 0' in text
    assert "pod_uid=" not in text and 'DCGM_FI_DEV_POWER_USAGE{' in text and 'pod="' in text


def test_the_flags_need_a_node_name_and_a_valid_allowlist():
    base = [sys.executable, "-m", "gpuwatch", "export", "--source", "simulate", "--listen", "127.0.0.1:0"]
    env = {k: v for k, v in os.environ.items() if k != "NODE_NAME"}
    done = subprocess.run([*base, "--kubernetes-enable-pod-uid", "--kubernetes-api", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 2 and "NODE_NAME" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    bad = subprocess.run([*base, "--node-name", "n", "--kubernetes-enable-pod-labels",
                          "--kubernetes-pod-label-allowlist-regex", "[x", "--kubernetes-api", "http://127.0.0.1:9"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert bad.returncode == 2 and "--kubernetes-pod-label-allowlist-regex" in bad.stderr, bad.stderr
