"""Cluster state for plan(): read the GPU pods and their owners, parse them into PodStates.

``snapshot`` does the reading (through ``kube.Cluster``); everything else here is pure and is
fed captured JSON in tests. Owners are resolved the way the controllers own pods: Pod ->
ReplicaSet -> Deployment, Pod -> StatefulSet -> Notebook (Kubeflow), Pod -> Job, Pod -> any
custom kind (RayCluster, ...), or the bare Pod itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from gpuwatch.reclaim import (
    KUBEFLOW_STOP_ANNOTATION,
    OPT_IN_LABEL,
    RECLAIMED_ANNOTATION,
    WARNING_ANNOTATION,
)
from gpuwatch.reclaim.kube import KubeError
from gpuwatch.reclaim.records import PodState

log = logging.getLogger(__name__)
GPU_RESOURCE_PREFIX = "nvidia.com/"  # nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-*
PARENTS = {"ReplicaSet": "Deployment", "StatefulSet": "Notebook"}  # owner kinds worth walking up to


def snapshot(cluster: Any, namespaces: Iterable[str], *, team_label: str = "team") -> list[PodState]:
    """The GPU pods (and warned pods) of ``namespaces``, opted-in namespaces included."""
    names = set(namespaces) | set(opted_in_namespaces(cluster))
    cache: dict[tuple[str, str, str], dict | None] = {}
    states = []
    for namespace in sorted(names):
        ns_obj = cluster.read("Namespace", "", namespace)
        if ns_obj is None:
            continue
        for pod in _pods(cluster, namespace):
            if not _relevant(pod):
                continue
            kind, name, owner = resolve_owner(cluster, pod, cache)
            states.append(pod_state(pod, ns_obj, kind, name, owner, team_label=team_label))
    return states


def _pods(cluster: Any, namespace: str) -> list[dict]:
    """The namespace's pods; none (logged) where the controller may not read them: with the
    chart's reclaim.rbac.namespaces it holds a Role only in the namespaces listed there."""
    try:
        return cluster.pods(namespace)
    except KubeError as exc:
        if exc.status != 403:
            raise
        log.warning("namespace %s is opted in but not readable (HTTP 403: outside the controller's "
                    "RBAC scope); its pods are left alone", namespace)
        return []


def opted_in_namespaces(cluster: Any) -> list[str]:
    """Namespaces carrying the opt-in label (one LIST with a label selector)."""
    api = cluster.api("CoreV1Api")
    listing = cluster.call(api.list_namespace, label_selector=f"{OPT_IN_LABEL}=enabled")
    return [item["metadata"]["name"] for item in (listing or {}).get("items", [])]


def resolve_owner(cluster: Any, obj: dict, cache: dict) -> tuple[str, str, dict | None]:
    """(kind, name, object) of the workload that owns ``obj``; walks up through PARENTS."""
    ref = controller_ref(obj)
    if ref is None:
        return obj.get("kind", "Pod"), obj["metadata"]["name"], None
    namespace = obj["metadata"].get("namespace", "")
    kind, name = ref["kind"], ref["name"]
    readable = kind in ("ReplicaSet", "Deployment", "StatefulSet", "Job") or kind in cluster.custom
    key = (kind, namespace, name)
    if key not in cache:
        cache[key] = cluster.read(kind, namespace, name) if readable else None
    owner = cache[key]
    parent = controller_ref(owner) if owner else None
    if parent and parent["kind"] == PARENTS.get(kind):
        up = (parent["kind"], namespace, parent["name"])
        if up not in cache:
            cache[up] = cluster.read(*up)
        return parent["kind"], parent["name"], cache[up]
    return kind, name, owner


def controller_ref(obj: dict | None) -> dict | None:
    """The ownerReference with ``controller: true`` (else the first one), or None."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if r.get("controller")), refs[0] if refs else None)


def pod_state(pod: dict, namespace: dict, owner_kind: str, owner_name: str, owner: dict | None,
              *, team_label: str = "team") -> PodState:
    """Pure: one pod's PodState from its JSON, its namespace's and its owner's."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    ns_labels = (namespace.get("metadata") or {}).get("labels") or {}
    owner_meta = (owner or {}).get("metadata") or {}
    return PodState(
        namespace=meta["namespace"], pod=meta["name"], owner_kind=owner_kind, owner_name=owner_name,
        team=labels.get(team_label) or ns_labels.get(team_label) or meta["namespace"],
        priority_class=(pod.get("spec") or {}).get("priorityClassName") or "",
        uid=meta.get("uid", ""), namespace_labels=ns_labels,
        pod_annotations=meta.get("annotations") or {},
        owner_annotations=owner_meta.get("annotations") or {},
        owner_stopped=stopped(owner_kind, owner), gpu_count=gpu_count(pod))


def stopped(kind: str, owner: dict | None) -> bool:
    """Whether the owner already holds no GPUs (so there is nothing to reclaim)."""
    if owner is None:
        return False
    spec = owner.get("spec") or {}
    notes = (owner.get("metadata") or {}).get("annotations") or {}
    if kind == "Notebook":
        return KUBEFLOW_STOP_ANNOTATION in notes
    if kind in ("Deployment", "StatefulSet"):
        return spec.get("replicas", 1) == 0
    if kind == "Job":
        return spec.get("suspend") is True
    return RECLAIMED_ANNOTATION in notes


def gpu_count(pod: dict) -> float:
    """GPUs the pod's containers ask for (limits, else requests) across nvidia.com/* resources."""
    total = 0.0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        asked = resources.get("limits") or resources.get("requests") or {}
        total += sum(_quantity(v) for k, v in asked.items() if k.startswith(GPU_RESOURCE_PREFIX))
    return total


def _quantity(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def _relevant(pod: dict) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    warned = WARNING_ANNOTATION in ((pod["metadata"].get("annotations")) or {})
    return phase not in ("Succeeded", "Failed") and (gpu_count(pod) > 0 or warned)
