"""Bundle frames -> OpenMetrics text in dcgm-exporter / kube-state-metrics naming (the inverse of
``promframes``), for ``promtool tsdb create-blocks-from openmetrics``.

Used to backfill a Prometheus with a bundle (bench/promql.py compares PromQL with the analyzer on
the same data) and by tests. Names and units go back to those of the dcgm-exporter ``generation``
asked for (gpuwatch/fields.py): 4.8 ratio -> % for GPU_UTIL, bytes -> MiB for FB_USED/FB_FREE; 4.9
keeps base units under its ``*_RATIO``/``*_BYTES`` names. Missing values (NaN) are not written, as dcgm-exporter skips blank fields.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable

import numpy as np

from gpuwatch import fields
from gpuwatch.ingest.series import ksm_label
from gpuwatch.model import BUNDLE_COLUMNS, POD_PHASES

# family name -> list of (labels, ts array, value array)
Families = dict[str, list[tuple[dict, np.ndarray, np.ndarray]]]
_SANITISE = re.compile(r"[^a-zA-Z0-9_]")
# kube-state-metrics' own pod labels on its series when Prometheus scrapes it with honorLabels: false
KSM_TARGET = {"namespace": "monitoring", "pod": "kube-state-metrics-6d4f8b7c9-x2x7q", "container": "kube-state-metrics"}


def ksm_resource(resource: str) -> str:
    """kube-state-metrics' label for a resource name: ``nvidia.com/mig-1g.10gb`` -> ``nvidia_com_mig_1g_10gb``."""
    return _SANITISE.sub("_", resource)


def sample_families(devices, samples, *, hostname_label: str = "hostname", exported: bool = False,
                    generation: str = "4.8") -> Families:
    """DCGM-named series of a bundle's samples (plus FB_FREE where the device's size is known), named
    and in the units of dcgm-exporter ``generation``."""
    out: Families = {}
    served = [n for n in fields.served(generation).values() if n.field.column]
    free = next(n for n in fields.served(generation).values() if n.field.name == "DCGM_FI_DEV_FB_FREE")
    info = {(r.node, r.gpu_uuid, _gi(r.mig_gi_id)): r for r in devices.itertuples(index=False)}
    keys = ["node", "gpu_uuid", "mig_gi_id", "namespace", "pod", "container"]
    frame = samples.assign(mig_gi_id=samples["mig_gi_id"].map(_gi), t=_epoch(samples["ts"]))
    for key, group in frame.groupby(keys, dropna=False, sort=True):
        key = (*key[:2], _gi(key[2]), *key[3:])  # groupby hands MIG ids back as floats
        device = info.get(key[:3])
        labels = _device_labels(key, device, hostname_label) | _workload(key[3:], exported)
        for name in served:
            _add(out, name.name, labels, group["t"].to_numpy(), group[name.field.column].to_numpy(dtype=float) / name.to_base)
        if device is not None and not _missing(device.fb_total_bytes):
            left = float(device.fb_total_bytes) - group["fb_used_bytes"].to_numpy(dtype=float)
            _add(out, free.name, labels, group["t"].to_numpy(), left / free.to_base)
    return out


def _label_series(pod, team_label: str) -> dict[str, str]:
    """kube_pod_labels' labels for a pod, as kube-state-metrics names them (label_<sanitised key>)."""
    raw = getattr(pod, "labels", None)
    found = json.loads(raw) if isinstance(raw, str) and raw.strip() else {}
    out = {ksm_label(k): str(v) for k, v in found.items()}
    if pod.team:
        out[ksm_label(team_label)] = pod.team
    return out


def ksm_families(pods, grid: np.ndarray, *, team_label: str = "team", linger: float = 300.0) -> Families:
    """kube-state-metrics series for each pod while its object exists: [start, end + linger]."""
    out: Families = {}
    for p in pods.itertuples(index=False):
        start = round(_epoch_one(p.start_ts))  # KSM reports whole seconds
        end = None if _missing(p.end_ts) else round(_epoch_one(p.end_ts))
        t = grid[(grid >= start) & (grid <= (end + linger if end is not None else grid[-1]))]
        if not len(t):
            continue
        pod = {"namespace": p.namespace, "pod": p.pod, "uid": p.pod_uid or ""}
        ones = np.ones(len(t))
        _add(out, "kube_pod_info", pod | {"node": p.node or "", "priority_class": p.priority_class or ""}, t, ones)
        if p.owner_kind:
            _add(out, "kube_pod_owner", pod | {"owner_kind": p.owner_kind, "owner_name": p.owner_name or "",
                                               "owner_is_controller": "true"}, t, ones)
        _add(out, "kube_pod_labels", pod | _label_series(p, team_label), t, ones)
        count = len([d for d in str(p.device_ids or "").split(",") if d]) or float(p.gpu_count)
        _add(out, "kube_pod_container_resource_requests", pod | {
            "container": "main", "node": p.node or "", "resource": ksm_resource(p.gpu_resource), "unit": "integer"},
            t, ones * count)
        _add(out, "kube_pod_start_time", pod, t, ones * start)
        if end is not None and (done := t[t >= end]).size:
            _add(out, "kube_pod_completion_time", pod, done, np.full(len(done), end))
    return out


def ksm_status_families(status, grid: np.ndarray, *, exitcode: bool = True, exported: bool = False,
                        job_label: str = "training.kubeflow.org/job-name") -> Families:
    """kube-state-metrics series of a ``pod_status`` frame (change rows) on ``grid``: each (pod,
    container) holds its row's state until its next row, from the pod's first row to the grid's end.
    ``exitcode=False``: KSM < 2.7 (no ``..._last_terminated_exitcode``); ``exported``: labels as
    Prometheus renames them under ``honorLabels: false`` (KSM's own pod labels beside them). A ``job``
    ``Kind/name`` is written as ``kube_pod_owner``, any other as pod label ``job_label``."""
    out: Families = {}
    frame = status.assign(t=_epoch(status["ts"]), container=status["container"].fillna(""))
    for (ns, pod), rows in frame.groupby(["namespace", "pod"], sort=True):
        t = grid[grid >= rows["t"].min()]
        held = {c: _held(r, t) for c, r in rows.groupby("container", sort=True)}
        ident = {"exported_namespace": ns, "exported_pod": pod, **KSM_TARGET} if exported else {"namespace": ns, "pod": pod}
        pod_state = next(iter(held.values()))  # pod-level columns are the same on every container
        known = np.array([v is not None for v in pod_state["phase"]])
        for phase in POD_PHASES:
            _add(out, "kube_pod_status_phase", ident | {"phase": phase}, t,
                 np.where(known, (pod_state["phase"] == phase).astype(float), np.nan))
        for job in {j for j in pod_state["job"] if j is not None}:
            kind, _, name = job.rpartition("/")
            labels = {"owner_kind": kind, "owner_name": name, "owner_is_controller": "true"} if kind else {ksm_label(job_label): job}
            _add(out, "kube_pod_owner" if kind else "kube_pod_labels", ident | labels, t, _where(pod_state["job"], job))
        for index, (container, state) in enumerate(held.items()):
            c = ident | {("exported_container" if exported else "container"): container}
            if index == 0:
                _add(out, "kube_pod_container_resource_requests", c | {"node": "", "resource": "nvidia_com_gpu", "unit": "integer"},
                     t, _floats(state["gpu_request"]))
            _add(out, "kube_pod_container_status_restarts_total", c, t, _floats(state["restarts"]))
            if exitcode:
                _add(out, "kube_pod_container_status_last_terminated_exitcode", c, t, _floats(state["last_exit_code"]))
            for column in ("last_terminated_reason", "waiting_reason"):
                for reason in {r for r in state[column] if r is not None}:
                    _add(out, f"kube_pod_container_status_{column}", c | {"reason": reason}, t, _where(state[column], reason))
    return out


def _held(rows, t: np.ndarray) -> dict[str, np.ndarray]:
    """Each column's value at every ``t``: the last row at or before it (None before the first)."""
    rows = rows.sort_values("t")
    index = np.searchsorted(rows["t"].to_numpy(), t, side="right") - 1
    out = {}
    for column in BUNDLE_COLUMNS["pod_status"][4:]:
        values = rows[column].astype(object).where(rows[column].notna(), None).to_numpy()
        out[column] = np.array([values[i] if i >= 0 else None for i in index], dtype=object)
    return out


def _where(values: np.ndarray, match) -> np.ndarray:
    """1 where ``values`` is ``match``, absent (NaN) elsewhere: KSM's one series per reason/label set."""
    return np.array([1.0 if v == match else np.nan for v in values])


def _floats(values: np.ndarray) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values])


def ksm_node_families(pods, grid: np.ndarray) -> Families:
    """``kube_node_labels{label_nvidia_com_gpu_replicas}`` (GPU Feature Discovery) for nodes whose
    pods hold time-sliced GPUs: replicas = GPUs requested / GPU share held."""
    out: Families = {}
    shared = pods[pods["gpu_resource"].fillna("").str.endswith(".shared") & (pods["gpu_count"] > 0)]
    for node, group in shared.groupby("node"):
        p = group.iloc[0]
        replicas = round(len(str(p.device_ids).split(",")) / float(p.gpu_count))
        _add(out, "kube_node_labels", {"node": node, "label_nvidia_com_gpu_replicas": str(replicas)}, grid,
             np.ones(len(grid)))
    return out


def write(path, *parts: Families) -> int:
    """Write ``parts`` (merged by family) as one OpenMetrics file ending in ``# EOF``; returns samples."""
    merged: Families = {}
    for part in parts:
        for name, series in part.items():
            merged.setdefault(name, []).extend(series)
    written = 0
    with open(path, "w", encoding="utf-8") as out:
        for name in sorted(merged):
            out.write(f"# TYPE {name} gauge\n")
            for labels, ts, values in merged[name]:
                text = _labels(labels)
                out.writelines(f"{name}{text} {_value(v)} {t:.3f}\n" for t, v in zip(ts, values, strict=True))
                written += len(ts)
        out.write("# EOF\n")
    return written


def _add(out: Families, name: str, labels: dict, ts: np.ndarray, values: np.ndarray) -> None:
    ok = np.isfinite(values)
    if ok.any():
        out.setdefault(name, []).append((labels, ts[ok], values[ok]))


def _device_labels(key: tuple, device, hostname_label: str) -> dict:
    node, uuid, gi = key[:3]
    labels = {"gpu": "" if device is None or _missing(device.gpu_index) else str(int(device.gpu_index)), "UUID": uuid}
    labels["device"] = f"nvidia{labels['gpu']}"
    if device is not None and device.gpu_model:
        labels["modelName"] = device.gpu_model
    if gi is not None:
        labels |= {"GPU_I_PROFILE": getattr(device, "mig_profile", None) or "", "GPU_I_ID": str(int(gi))}
    return labels | {hostname_label: node}


def _workload(key: Iterable, exported: bool) -> dict:
    ns, pod, container = (None if _missing(v) else v for v in key)
    if pod is None:
        return {}
    prefix = "exported_" if exported else ""
    return {f"{prefix}pod": pod, f"{prefix}namespace": ns or "", f"{prefix}container": container or ""}


def _labels(labels: dict) -> str:
    body = ",".join(f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                    for k, v in labels.items())
    return "{" + body + "}" if body else ""


def _value(v: float) -> str:
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def _gi(value) -> int | None:
    return None if _missing(value) else int(value)


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or str(value) in ("<NA>", "NaT", "nan", "")


def _epoch(column) -> np.ndarray:
    import pandas as pd

    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(dtype=float)
    return (pd.to_datetime(column, utc=True) - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy()


def _epoch_one(value) -> float:
    import pandas as pd

    return float(value) if isinstance(value, int | float) else pd.Timestamp(value).timestamp()
