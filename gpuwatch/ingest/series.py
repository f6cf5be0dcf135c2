"""Prometheus series as the ingest readers hand them over, and what their labels say.

The one place that knows dcgm-exporter's label generations (``hostname``/``Hostname``,
``UUID``/``uuid``, ``exported_*`` under ``honorLabels: false``, old-namespace ``pod_name``…).
Shared by ``promframes`` (devices and samples) and ``promframes_pods`` (pods); imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Series:
    """One time series: the metric name as served, its labels, epoch-second timestamps and values."""

    name: str
    labels: Mapping[str, str]
    ts: np.ndarray
    values: np.ndarray


@dataclass
class Context:
    """What the labels alone don't say: the scrape targets' own pods, the window, knobs."""

    target_pods: frozenset = frozenset()  # (namespace, pod) of exporter pods: never a workload
    window_end: float | None = None  # a pod last seen within one step of this is still running
    step: float | None = None
    team_label: str = "team"
    shared_replicas: float | None = None  # time-slicing replicas: a `.shared` GPU counts 1/n; None = from KSM
    notes: list[str] = field(default_factory=list)


def ksm_label(key: str) -> str:
    """The label kube-state-metrics gives pod label ``key`` on kube_pod_labels: ``label_`` + the key with
    every character outside [a-zA-Z0-9_] as ``_`` (``team.example.com/owner`` -> ``label_team_example_com_owner``)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def first(labels: Mapping[str, str], *names: str) -> str | None:
    """The first non-empty label among ``names`` (old exporters emit ``pod=""`` when unattributed)."""
    return next((labels[n] for n in names if labels.get(n)), None)


def node_of(labels: Mapping[str, str]) -> str:
    """The node of a DCGM/gpuwatch series: its hostname/node label, else its scrape instance's host
    ("" when neither)."""
    return first(labels, "hostname", "Hostname", "node") or (labels.get("instance") or "").rsplit(":", 1)[0]


def device_of(labels: Mapping[str, str]) -> tuple | None:
    """(node, gpu_uuid, mig_gi_id) of a DCGM/gpuwatch series; None without a GPU UUID, without a
    node (no hostname/node label and no scrape instance) or with a GPU_I_ID that is no instance id
    (``bad_gi``): such a series has no device to attach to."""
    uuid = first(labels, "UUID", "uuid", "gpu_uuid")
    node = node_of(labels)
    gi = first(labels, "GPU_I_ID")
    if uuid is None or not node or bad_gi(labels):
        return None
    return node, uuid, int(gi) if gi is not None else None


def bad_gi(labels: Mapping[str, str]) -> bool:
    """A ``GPU_I_ID`` that is no MIG GPU instance id (not a small whole number): the series names no device."""
    gi = first(labels, "GPU_I_ID")
    return gi is not None and whole(gi) is None


def whole(text: str | None, *, limit: int = 2**31 - 1) -> int | None:
    """A label's whole number (ASCII digits, at most ``limit``), else None."""
    if text is None or not re.fullmatch(r"[0-9]{1,10}", text) or int(text) > limit:
        return None
    return int(text)


def workload_of(labels: Mapping[str, str], target_pods: frozenset = frozenset()) -> tuple:
    """(namespace, pod, container) attributed on a series, ``exported_*`` first; Nones if none.

    A plain ``pod`` equal to a scrape target's own pod is the exporter itself (target labels are
    attached to every unattributed series), not a workload.
    """
    if first(labels, "exported_pod"):
        return (first(labels, "exported_namespace"), first(labels, "exported_pod"),
                first(labels, "exported_container"))
    ns, pod = first(labels, "namespace", "pod_namespace"), first(labels, "pod", "pod_name")
    if pod is None or (ns, pod) in target_pods:
        return None, None, None
    return ns, pod, first(labels, "container", "container_name")


def target_pods(series: Iterable[Series]) -> frozenset:
    """(namespace, pod) of scrape targets: the plain labels beside an ``exported_pod``.

    With ``honorLabels: false`` the exporter's own pod labels sit next to ``exported_*`` ones, and
    also on every unattributed series of that target, where they must not read as a workload.
    """
    return frozenset((s.labels.get("namespace"), s.labels["pod"]) for s in series
                     if s.labels.get("exported_pod") and s.labels.get("pod"))


def nones(frame, *columns: str):
    """Missing text as None (pandas turns None into NaN when it builds object columns)."""
    for column in columns:
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame
