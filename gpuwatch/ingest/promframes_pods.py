"""The bundle's ``pods`` frame from Prometheus series: kube-state-metrics, gpuwatch, attribution.

Per pod, each field from the best source present:
- identity/placement: ``kube_pod_info`` (uid, node, priority_class), ``kube_pod_owner``
  (owner_kind, owner_name; ``<none>`` = none), ``kube_pod_labels`` (``label_<team_label>``; KSM
  exports only allow-listed labels: ``--metric-labels-allowlist=pods=[team]``);
- GPUs: ``kube_pod_container_resource_requests{resource=~"nvidia_com_.*"}`` summed over
  containers (KSM sanitises ``nvidia.com/mig-1g.10gb`` to ``nvidia_com_mig_1g_10gb``; mapped
  back), else ``gpuwatch_gpu_allocation_info`` (exact resource name), else the number of devices
  attributed to the pod on the DCGM series; a ``.shared`` (time-sliced) GPU counts 1/replicas;
- device_ids: ``gpuwatch_gpu_allocation_info`` (MIG instances by their ``MIG-…`` uuid from
  ``gpuwatch_mig_instance_info``), else the attributed devices (GPU UUID, or ``<GPU uuid>/<gi>``
  for a MIG instance whose MIG uuid is unknown);
- start_ts/end_ts: ``kube_pod_start_time`` (else ``kube_pod_created``) and
  ``kube_pod_completion_time``; else first/last presence on any series, the end one step after the
  last sample, and empty (still running) when the last sample is within one step of the window end.
"""

from __future__ import annotations

import json
import re

import numpy as np

from gpuwatch.ingest.series import device_of, first, ksm_label, nones, workload_of
from gpuwatch.model import BUNDLE_COLUMNS

KSM_TIMES = {"kube_pod_start_time": "start", "kube_pod_created": "created", "kube_pod_completion_time": "completed"}
_MIG_RESOURCE = re.compile(r"^nvidia_com_mig_(\d+g)_(\d+gb)((?:_me|_gfx|_all)*)$")


def resource_name(ksm: str) -> str:
    """kube-state-metrics' sanitised resource label -> the Kubernetes resource name."""
    if ksm.startswith("nvidia.com/"):
        return ksm
    if match := _MIG_RESOURCE.match(ksm):
        return f"nvidia.com/mig-{match[1]}.{match[2]}" + match[3].replace("_", ".")
    if ksm == "nvidia_com_gpu_shared":
        return "nvidia.com/gpu.shared"
    return "nvidia.com/" + ksm.removeprefix("nvidia_com_")


def pods_frame(samples, series: list, ctx, *, mig_uuids: dict):
    """One row per pod holding GPUs (columns of model.BUNDLE_COLUMNS["pods"])."""
    import pandas as pd


    pods: dict[tuple, dict] = {}
    for s in series:
        ns, pod, _ = workload_of(s.labels, ctx.target_pods)
        if pod is None or not (s.name.startswith("kube_pod_") or s.name == "gpuwatch_gpu_allocation_info"):
            continue
        ok = np.isfinite(s.values)
        if not ok.any():
            continue
        row = pods.setdefault((ns, pod), {"seen": [], "requests": {}, "alloc": set()})
        row["seen"] += [float(s.ts[ok].min()), float(s.ts[ok].max())]
        _absorb(row, s.name, s.labels, float(s.values[ok][np.argmax(s.ts[ok])]), ctx, mig_uuids)
    _absorb_samples(pods, samples)
    replicas = _replicas(series, samples, ctx)
    rows = [_finish((ns, pod), row, ctx, replicas) for (ns, pod), row in sorted(pods.items(), key=lambda kv: str(kv[0]))
            if row["requests"] or row["alloc"] or row.get("devices")]
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["pods"]))
    for column in ("start_ts", "end_ts"):
        frame[column] = pd.to_datetime(np.round(frame[column].to_numpy(dtype=float) * 1000), unit="ms", utc=True)

    text = [c for c in BUNDLE_COLUMNS["pods"] if c not in ("start_ts", "end_ts", "gpu_count")]
    return nones(frame.astype({"gpu_count": float}), *text)


def ksm_notes(series: list, pods, ctx) -> list[str]:
    """Warnings where kube-state-metrics' series are absent while GPU pods exist: without them the teams
    silently become the namespaces (and pod states, pending pods are unknown)."""
    if pods is None or not len(pods):
        return []
    names = {s.name for s in series}
    if "kube_pod_info" not in names:
        return ["no kube-state-metrics series (kube_pod_info): pods are known only from the GPU series' pod labels, "
                "their teams are their namespaces, pod states and pending pods are unknown. Deploy kube-state-metrics "
                "and let this Prometheus scrape it (`gpuwatch doctor` lists what each finding needs)"]
    key = ksm_label(ctx.team_label)
    if not any(s.name == "kube_pod_labels" and s.labels.get(key) for s in series):
        return [f"no pod has the team label {ctx.team_label!r} on kube_pod_labels: teams are the namespaces. "
                "kube-state-metrics exports a pod label only when allow-listed (Helm values: metricLabelsAllowlist: "
                f"[pods=[{ctx.team_label}]]; `gpuwatch doctor` prints the whole snippet), or map namespaces to teams "
                "with --teams FILE"]
    return []


def _absorb(row: dict, name: str, labels, value: float, ctx, mig_uuids: dict) -> None:

    if name == "kube_pod_info":
        row.update(pod_uid=first(labels, "uid"), node=first(labels, "node"),
                   priority_class=first(labels, "priority_class"))
    elif name == "kube_pod_owner" and first(labels, "owner_kind") not in (None, "<none>"):
        row.update(owner_kind=labels["owner_kind"], owner_name=first(labels, "owner_name"))
    elif name == "kube_pod_labels":
        row["team"] = first(labels, ksm_label(ctx.team_label))
        found = {k.removeprefix("label_"): v for k, v in labels.items() if k.startswith("label_") and v}
        row["labels"] = json.dumps(found, sort_keys=True) if found else None
    elif name == "kube_pod_container_resource_requests" and (labels.get("resource") or "").startswith("nvidia"):
        key = (resource_name(labels["resource"]), labels.get("container"))
        row["requests"][key] = value
    elif name in KSM_TIMES:
        row[KSM_TIMES[name]] = value
    elif name == "gpuwatch_gpu_allocation_info" and (device := device_of(labels)) is not None:
        row["resource"] = first(labels, "resource") or row.get("resource")
        row["alloc"].add(_device_id(device, mig_uuids))
        row.setdefault("node", device[0])


def _absorb_samples(pods: dict, samples) -> None:
    """Presence, node and devices of each pod attributed on the DCGM series."""
    import pandas as pd

    attributed = samples[samples["pod"].notna()]
    for (ns, pod), group in attributed.groupby(["namespace", "pod"], dropna=False, sort=False):
        row = pods.setdefault((None if pd.isna(ns) else ns, pod), {"seen": [], "requests": {}, "alloc": set()})
        row["seen"] += [float(group["ts"].min()), float(group["ts"].max())]
        gis = group["mig_gi_id"].astype(object).where(group["mig_gi_id"].notna(), None)
        row["devices"] = {(n, u, None if g is None else int(g))
                          for n, u, g in zip(group["node"], group["gpu_uuid"], gis, strict=True)}
        row.setdefault("node", group["node"].iloc[0])


def _device_id(device: tuple, mig_uuids: dict) -> str:
    if device[2] is None:
        return device[1]
    return mig_uuids.get(device, f"{device[1]}/{device[2]}")


def _finish(key: tuple, row: dict, ctx, replicas: dict) -> dict:
    resource, count = _gpus(row, ctx, replicas.get(row.get("node"), 1.0))
    devices = row["alloc"] or {_device_id(d, {}) for d in row.get("devices", ())}
    start = row.get("start", row.get("created", min(row["seen"])))
    end = row.get("completed")
    if end is None:
        last = max(row["seen"])
        running = ctx.window_end is not None and last >= ctx.window_end - (ctx.step or 0.0)
        end = None if running or ctx.window_end is None else last + (ctx.step or 0.0)
    return {"namespace": key[0], "pod": key[1], "pod_uid": row.get("pod_uid"), "node": row.get("node"),
            "owner_kind": row.get("owner_kind"), "owner_name": row.get("owner_name"), "team": row.get("team"),
            "priority_class": row.get("priority_class"), "start_ts": start, "end_ts": end,
            "gpu_resource": resource, "gpu_count": count, "device_ids": ",".join(sorted(devices)),
            "labels": row.get("labels")}


def _gpus(row: dict, ctx, replicas: float) -> tuple[str | None, float]:
    """(resource, GPUs held) from requests, else the allocation/attribution device count."""
    if row["requests"]:
        totals: dict[str, float] = {}
        for (resource, _container), value in row["requests"].items():
            totals[resource] = totals.get(resource, 0.0) + value
        resource = max(totals, key=totals.get)
        count = totals[resource]
    else:
        resource = row.get("resource") or ("nvidia.com/gpu" if not _is_mig(row) else None)
        count = float(len(row["alloc"] or row.get("devices", ())))
    if resource and resource.endswith(".shared"):
        count /= ctx.shared_replicas or replicas
    return resource, round(count, 6)


def _replicas(series: list, samples, ctx) -> dict[str, float]:
    """Time-slicing replicas per node: GPU Feature Discovery's ``nvidia.com/gpu.replicas`` node
    label (``kube_node_labels``, allow-listed in KSM), else KSM's ``nvidia.com/gpu.shared``
    capacity / the node's GPUs (the plugin advertises every GPU ``replicas`` times).

    Without either, a shared GPU counts whole (a note says so) unless ``shared_replicas`` is given.
    """
    out: dict[str, float] = {}
    gpus = samples[samples["mig_gi_id"].isna()].groupby("node")["gpu_uuid"].nunique().to_dict() if len(samples) else {}
    for s in series:
        node, ok = s.labels.get("node"), np.isfinite(s.values)
        if s.name == "kube_node_labels" and (s.labels.get("label_nvidia_com_gpu_replicas") or "").isdigit():
            out[node] = float(s.labels["label_nvidia_com_gpu_replicas"])
        elif s.name == "kube_node_status_capacity" and ok.any() and gpus.get(node) and node not in out:
            out[node] = float(s.values[ok][-1]) / gpus[node]
    if ctx.shared_replicas is None and not out and any(s.labels.get("resource", "").endswith("_shared") for s in series):
        ctx.notes.append("time-sliced (.shared) pods count as whole GPUs: no nvidia.com/gpu.replicas node label "
                         "or gpu.shared capacity in kube-state-metrics, and no shared_replicas given")
    return out


def _is_mig(row: dict) -> bool:
    return any(d[2] is not None for d in row.get("devices", ()))
