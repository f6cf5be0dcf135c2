"""kube-state-metrics series -> the bundle's ``pod_status`` frame: one row per change of a pod's
(container's) state; a state holds until that pod's (container's) next row.

Families read, in the shapes kube-state-metrics emits them (``exported_*`` labels first, as
everywhere: Prometheus' ``honorLabels: false`` renames KSM's own ``pod``/``namespace``/``container``):
- ``kube_pod_status_phase{phase}``: one series per phase, 1 for the current one (none at 1: NULL);
- ``kube_pod_container_status_restarts_total{container}``;
- ``kube_pod_container_status_last_terminated_reason{container, reason}`` and
  ``kube_pod_container_status_waiting_reason{container, reason}``: the reason whose series is 1
  (KSM >= 2.0 emits only that one, and a waiting reason only while waiting; 1.x also 0 for the others);
- ``kube_pod_container_status_last_terminated_exitcode{container}`` (KSM >= 2.7; older: NULL);
- ``kube_pod_container_resource_requests{container, resource=~"nvidia_com_.*"}``: ``gpu_request``,
  the devices asked for (``nvidia.com/gpu``, ``.shared`` replicas, MIG instances) summed over
  containers and resources;
- ``kube_pod_labels`` / ``kube_pod_annotations`` (allow-listed keys only) -> ``job``, the gang the
  pod belongs to: the first of JOB_KEYS the pod carries, as label or annotation, else its
  controller owner from ``kube_pod_owner`` as ``<owner_kind>/<owner_name>``; NULL without either;
- pending demand (docs/architecture.md#topology): ``kube_pod_created`` and
  ``kube_pod_status_scheduled_time`` (values: epoch seconds) -> ``created_ts``, ``scheduled_ts``;
  ``kube_pod_status_unschedulable`` (KSM emits it, as 1, only while the scheduler says the pod cannot
  be placed) -> ``unschedulable`` 1, else 0 where the family is in the input and the pod's phase is
  known, else NULL; the GPU resources requested -> ``gpu_resource`` (KSM's sanitised name mapped
  back: ``nvidia_com_gpu`` -> ``nvidia.com/gpu``, ``nvidia_com_gpu_shared`` -> ``nvidia.com/gpu.shared``,
  ``nvidia_com_mig_1g_10gb`` -> ``nvidia.com/mig-1g.10gb``; any other kept as given; several: comma-
  separated); ``kube_pod_nodeselectors`` (opt-in in KSM) -> ``node_selector``, a JSON object of
  the ``nodeselector_<key>`` labels with keys as KSM serves them (sanitised, like ``nodes`` labels):
  ``{}`` = no selector, NULL = unknown.

A pod whose series stop inside the read window (deleted, or evicted and gone) gets a last row one step
after its last sample with every state column empty: its state is unknown from then on, never "still
Pending" (a pending pod deleted after a minute did not wait all week). A saved page has no window: none.

For each pod, at every timestamp one of its series has a sample, each of its containers (those named
on any container series; none: one row with container NULL) has the state (phase, restarts,
last_terminated_reason, last_exit_code, waiting_reason, job, gpu_request), pod-level columns repeated
on each container (the pending-demand columns too); a row is written at a pod's first sample and
whenever a column changes. A value with no sample at a timestamp is NULL there: never carried
forward, never guessed. Pods whose requests include no GPU in the window are left out (KSM reports
every pod of the cluster; the failure and pending analyses are about GPU pods). A pod that was never placed (no node, no device, never
scheduled nor running) held no GPUs: ``without_unplaced`` keeps it out of ``pods``; it is only here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import numpy as np

from gpuwatch.ingest.promframes_pods import resource_name
from gpuwatch.ingest.series import Context, Series, first, ksm_label, nones, workload_of
from gpuwatch.model import BUNDLE_COLUMNS, POD_PHASES

# Job keys (pod label or annotation), most specific gang first; the owner is the fallback.
JOB_KEYS: tuple[str, ...] = (
    "scheduling.k8s.io/group-name",  # Volcano PodGroup (an annotation Volcano sets on its pods)
    "pod-group-name",  # KAI Scheduler PodGroup (an annotation its pod-grouper sets on every pod)
    "volcano.sh/job-name",  # Volcano Job (label)
    "kueue.x-k8s.io/pod-group-name",  # Kueue pod group: plain pods, LeaderWorkerSet (label)
    "kueue.x-k8s.io/prebuilt-workload-name",  # Kueue prebuilt workload (label)
    "kueue.x-k8s.io/workload",  # Kueue workload (annotation)
    "training.kubeflow.org/job-name",  # Kubeflow Training Operator job (label)
    "jobset.sigs.k8s.io/jobset-name",  # JobSet; Kubeflow Trainer v2 runs a TrainJob as one (label)
)
PHASE, RESTARTS, LAST_REASON, EXIT_CODE, WAITING, REQUESTS = (
    "kube_pod_status_phase", "kube_pod_container_status_restarts_total",
    "kube_pod_container_status_last_terminated_reason", "kube_pod_container_status_last_terminated_exitcode",
    "kube_pod_container_status_waiting_reason", "kube_pod_container_resource_requests")
UNSCHEDULABLE, CREATED, SCHEDULED, SELECTORS = ("kube_pod_status_unschedulable", "kube_pod_created",
                                                "kube_pod_status_scheduled_time", "kube_pod_nodeselectors")
POD_FAMILIES = (PHASE, "kube_pod_labels", "kube_pod_annotations", "kube_pod_owner", UNSCHEDULABLE, CREATED, SCHEDULED,
                SELECTORS)
CONTAINER_FAMILIES = (RESTARTS, LAST_REASON, EXIT_CODE, WAITING, REQUESTS)
# Every family read here: a reader must fetch them step by step (the last value in each step).
KSM_FAMILIES = POD_FAMILIES + CONTAINER_FAMILIES
# KSM's sanitised names of the resources whose Kubernetes name is known; others are kept as given
_KNOWN_RESOURCE = re.compile(r"^nvidia_com_(?:gpu|gpu_shared|mig_\d+g_\d+gb(?:_me|_gfx|_all)*)$")


def pod_status_frame(series: Iterable[Series], ctx: Context):
    """The ``pod_status`` frame (model.BUNDLE_COLUMNS, ``ts`` in epoch seconds) from KSM ``series``."""
    import pandas as pd

    pods: dict[tuple, list[tuple]] = {}
    knows_unschedulable = False  # the family is served at all: a pod without it is schedulable (0)
    for s in series:
        if s.name not in KSM_FAMILIES:
            continue
        knows_unschedulable |= s.name == UNSCHEDULABLE
        ns, pod, container = workload_of(s.labels, ctx.target_pods)
        ok = np.isfinite(s.values)
        if pod is not None and ok.any():
            pods.setdefault((ns, pod), []).append((s, container, s.ts[ok], s.values[ok]))
    rows = []
    for key in sorted(pods, key=str):
        at = _states(pods[key])
        if _requests_gpu(at):
            last = max(float(ts.max()) for _, _, ts, _ in pods[key])
            rows += _changes(key, at, knows_unschedulable=knows_unschedulable, gone_at=_gone_at(last, ctx))
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["pod_status"]))
    frame = frame.astype({"ts": float, "restarts": "Int64", "last_exit_code": "Int64", "gpu_request": float,
                          "created_ts": float, "scheduled_ts": float, "unschedulable": "Int64"})
    text = ("namespace", "pod", "container", "phase", "last_terminated_reason", "waiting_reason", "job",
            "gpu_resource", "node_selector")
    return nones(frame, *text)


def without_unplaced(pods, status):
    """``pods`` less those never placed: no node, no device, and per ``status`` never scheduled nor
    running (a pod waiting for GPUs holds none; its demand is in ``pod_status``)."""
    if pods.empty or status.empty:
        return pods
    placed = status[status["scheduled_ts"].notna() | status["phase"].isin(["Running", "Succeeded"])]
    known = set(zip(status["namespace"], status["pod"], strict=True))
    ran = set(zip(placed["namespace"], placed["pod"], strict=True))
    keys = list(zip(pods["namespace"], pods["pod"], strict=True))
    unplaced = [k in known and k not in ran for k in keys]
    drop = pods["node"].isna() & (pods["device_ids"].fillna("") == "") & np.array(unplaced, dtype=bool)
    return pods[~drop].reset_index(drop=True)


def _states(members: list[tuple]) -> dict[float, dict]:
    """The pod's state at each timestamp where it may change: where a series starts, changes value,
    resumes after a gap or ends (elsewhere every series holds, so the state does too)."""
    grid = np.unique(np.concatenate([ts for _, _, ts, _ in members]))
    located, keys = [], {0}
    for s, container, ts, values in members:
        order = np.argsort(ts, kind="stable")
        pos, values = np.searchsorted(grid, ts[order]), values[order]
        runs = np.diff(pos) != 1
        keys.update(pos[np.concatenate([[True], runs | (values[1:] != values[:-1])])].tolist())
        keys.update((pos[np.concatenate([runs, [True]])] + 1).tolist())
        located.append((s, container, pos, values))
    at: dict[float, dict] = {}
    for k in sorted(k for k in keys if k < len(grid)):
        state = at[float(grid[k])] = {"containers": {}}
        for s, container, pos, values in located:
            i = np.searchsorted(pos, k)
            if i < len(pos) and pos[i] == k:
                _absorb(state, s.name, s.labels, container, float(values[i]))
    return at


def _absorb(state: dict, name: str, labels, container: str | None, value: float) -> None:
    """One sample of family ``name`` into the pod's state at its timestamp."""
    if name == PHASE:
        if value == 1 and labels.get("phase"):
            state.setdefault("phases", set()).add(labels["phase"])
    elif name == UNSCHEDULABLE and value in (0, 1):
        state["unschedulable"] = max(int(value), state.get("unschedulable", 0))
    elif name in (CREATED, SCHEDULED) and value > 0:
        state[name] = value
    elif name == SELECTORS:
        found = {k.removeprefix("nodeselector_"): v for k, v in labels.items() if k.startswith("nodeselector_") and v}
        state["selector"] = state.get("selector", {}) | found
    elif name in ("kube_pod_labels", "kube_pod_annotations"):
        state.setdefault("meta", {}).update({k: v for k, v in labels.items() if v})
    elif name == "kube_pod_owner":
        kind = first(labels, "owner_kind")
        if kind not in (None, "<none>"):
            controller = labels.get("owner_is_controller") == "true"
            state.setdefault("owners", []).append((not controller, kind, first(labels, "owner_name") or ""))
    elif name == REQUESTS:
        resource = labels.get("resource") or ""
        if resource.startswith("nvidia_com_") and value >= 0:
            # once per (container, resource): a series relabelled within a step (its node set) counts once
            requests = state["containers"].setdefault(container, {}).setdefault("requests", {})
            requests[resource] = max(value, requests.get(resource, 0.0))
    else:
        c = state["containers"].setdefault(container, {})
        if name == RESTARTS and value >= 0:
            c["restarts"] = int(value)
        elif name == EXIT_CODE:
            c["exit"] = int(value)
        elif name in (LAST_REASON, WAITING) and value == 1 and labels.get("reason"):
            c.setdefault(name, set()).add(labels["reason"])


def _requests_gpu(at: dict[float, dict]) -> bool:
    return any(sum(c.get("requests", {}).values()) > 0 for state in at.values() for c in state["containers"].values())


def _gone_at(last: float, ctx: Context) -> float | None:
    """When a pod stopped being reported (deleted) inside a read window: one step after its ``last``
    sample, if that is before the window's end; None for a snapshot (no window) or a pod reported to the end."""
    if ctx.window_end is None or not ctx.step:
        return None
    gone = last + ctx.step
    return gone if gone < ctx.window_end - 1e-6 else None


def _changes(key: tuple, at: dict[float, dict], *, knows_unschedulable: bool, gone_at: float | None = None) -> list[tuple]:
    """(ts, namespace, pod, container, *state) at the pod's first sample and at each change; at ``gone_at``
    a row with every state column empty: no longer reported (its state from then on is unknown)."""
    containers = sorted({c for state in at.values() for c in state["containers"]}, key=str) or [None]
    before: dict[str | None, tuple] = {}
    rows = []
    for t in sorted(at):
        state = at[t]
        phase = _one(state.get("phases"), POD_PHASES)
        pod = (phase, _job(state), _gpu_request(state), *_pending(state, phase, knows_unschedulable))
        for name in containers:
            c = state["containers"].get(name, {})
            now = (pod[0], c.get("restarts"), _one(c.get(LAST_REASON)), c.get("exit"), _one(c.get(WAITING)), *pod[1:])
            if before.get(name, ()) != now:
                before[name] = now
                rows.append((t, *key, name, *now))
    if gone_at is not None:
        rows += [(gone_at, *key, name, *[None] * (len(BUNDLE_COLUMNS["pod_status"]) - 4)) for name in containers]
    return rows


def _one(values: set | None, allowed: tuple[str, ...] | None = None) -> str | None:
    """The one value at 1; None where none is, or several are (never a pick among them)."""
    if not values or len(values) > 1:
        return None
    value = next(iter(values))
    return value if allowed is None or value in allowed else None


def _job(state: dict) -> str | None:
    """The first JOB_KEYS value on the pod's labels or annotations, else ``Kind/name`` of its owner."""
    meta = state.get("meta", {})
    for key in JOB_KEYS:
        name = ksm_label(key).removeprefix("label_")
        if value := meta.get(f"label_{name}") or meta.get(f"annotation_{name}"):
            return value
    owners = sorted(state.get("owners", ()))  # the controller first
    return f"{owners[0][1]}/{owners[0][2]}" if owners else None


def _pending(state: dict, phase: str | None, knows_unschedulable: bool) -> tuple:
    """(created_ts, scheduled_ts, unschedulable, gpu_resource, node_selector) of the pod's state."""
    unschedulable = state.get("unschedulable", 0 if knows_unschedulable and phase is not None else None)
    selector = state.get("selector")
    return (state.get(CREATED), state.get(SCHEDULED), unschedulable, _gpu_resource(state),
            None if selector is None else json.dumps(selector, sort_keys=True))


def gpu_resource(ksm: str) -> str:
    """The Kubernetes name of a resource KSM serves sanitised, where it is known; else as given."""
    return resource_name(ksm) if _KNOWN_RESOURCE.match(ksm) or ksm.startswith("nvidia.com/") else ksm


def _gpu_resource(state: dict) -> str | None:
    names = {gpu_resource(r) for c in state["containers"].values() for r, v in c.get("requests", {}).items() if v > 0}
    return ",".join(sorted(names)) or None


def _gpu_request(state: dict) -> float | None:
    requests = [v for c in state["containers"].values() for v in c.get("requests", {}).values()]
    return float(sum(requests)) if requests else None
