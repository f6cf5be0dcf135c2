"""Prometheus series (dcgm-exporter, gpuwatch, kube-state-metrics names) -> bundle frames.

Shared, pure core of ``ingest.prometheus`` (HTTP API) and ``ingest.promfile`` (saved /metrics):
both turn what they read into ``Series`` (keeping the name as served) and call ``build``.
Conversions to base units happen here and only here, from the unit the field table
(gpuwatch/fields.py) says the *name* is served in: every dcgm-exporter naming generation is read
(1.x ``dcgm_*``, 2.x-4.8 ``DCGM_FI_*`` in %/MiB, 4.9 ``*_RATIO``/``*_BYTES`` in base units), each
converted from its own generation's unit, never from the values. NaN/±Inf values are
missing, never 0. Every label generation of dcgm-exporter is accepted: ``hostname`` (main after
#655) or ``Hostname`` (releases <= 4.5.3-4.8.2), ``UUID`` or ``uuid`` (``--use-old-namespace``),
``pod``/``namespace``/``container`` or ``exported_*`` (Prometheus ``honorLabels: false``, which
win) or ``pod_name``/``pod_namespace``/``container_name`` (old namespace), ``GPU_I_PROFILE`` and
``GPU_I_ID`` for MIG instances. Pod states and GPU health events (``pod_status``, ``health``) are
built by ``promframes_status`` and ``promframes_health``; devices carry their node's driver and
CUDA versions (``driver_versions``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import numpy as np

from gpuwatch import fields
from gpuwatch.ingest import (
    promframes_health,
    promframes_mig,
    promframes_pods,
    promframes_processes,
    promframes_queues,
    promframes_shared,
    promframes_status,
    promframes_topology,
)
from gpuwatch.ingest import series as series_labels
from gpuwatch.ingest.series import (
    Context,
    Series,
    device_of,
    first,
    node_of,
    nones,
    target_pods,
    workload_of,
)
from gpuwatch.model import BUNDLE_COLUMNS

log = logging.getLogger(__name__)
# Every served name of a samples field (all generations) -> (samples column, factor from that
# generation's unit to the base unit), from the field table.
SAMPLE_FIELDS: dict[str, tuple[str, float]] = {
    n.name: (n.field.column, n.to_base) for n in fields.NAMES.values() if n.field.column and n.field.type}
# Series that only describe devices (capacity, MIG layout): served name -> factor to base units
# (FB total too: 4.9 serves it by default as DCGM_FI_DEV_FB_CAPACITY_BYTES, a counters file may as FB_TOTAL).
DEVICE_FIELDS: dict[str, float] = {
    n.name: n.to_base for n in fields.NAMES.values() if n.field.device_column} | {
    "gpuwatch_gpu_memory_total_bytes": 1.0, "gpuwatch_mig_instance_info": 1.0}
# The unit each served name is declared in; where a page carries a HELP text naming a unit
# ("... (in MiB)."), a different unit is refused rather than converted by a guess.
HELP_UNITS: dict[str, str] = {name: fields.NAMES[name].unit for name in SAMPLE_FIELDS | DEVICE_FIELDS
                              if name in fields.NAMES and fields.NAMES[name].unit}
SAMPLE_KEY = ("node", "gpu_uuid", "mig_gi_id", "namespace", "pod", "container")
# The driver version label on DCGM series, per generation (4.9 serves DCGM 4.6's name)
DRIVER_LABELS = tuple(n.name for n in fields.NAMES.values() if n.field.name == "DCGM_FI_DRIVER_VERSION")


def field_key(name: str) -> str:
    """The field a served name stands for, by its 2.x-4.8 name (gpuwatch's own names unchanged)."""
    return fields.NAMES[name].field.name if name in fields.NAMES else name


def build(series: Iterable[Series], ctx: Context | None = None) -> dict:
    """Bundle frames ``devices``, ``samples``, ``pods``, ``nodes``, ``pod_status``, ``health``,
    ``topology``, ``processes``, ``scheduler_pending`` (model.BUNDLE_COLUMNS) from ``series``."""
    ctx = ctx or Context()
    series = list(series)
    ctx.target_pods = frozenset(ctx.target_pods) | target_pods(series)
    samples = samples_frame(series, ctx)
    devices = promframes_topology.with_topology(devices_frame(series, ctx.notes), series, ctx.notes)
    status = promframes_status.pod_status_frame(series, ctx)
    pods = promframes_status.without_unplaced(promframes_pods.pods_frame(samples, series, ctx, mig_uuids=_mig_uuids(series)), status)
    gpu_series = [s for s in series if s.name in SAMPLE_FIELDS or s.name in DEVICE_FIELDS]
    bad_gi = [s for s in gpu_series if series_labels.bad_gi(s.labels)]
    unplaced = sum(1 for s in gpu_series if _identity_missing(s.labels)) - len(bad_gi)
    if unplaced:
        ctx.notes.append(f"{unplaced} GPU series without a GPU UUID or a hostname/node label were not loaded "
                         "(no device to attach them to)")
    if bad_gi:
        ctx.notes.append(f"{len(bad_gi)} GPU series with a GPU_I_ID that is no MIG instance id (e.g. "
                         f"{series_labels.first(bad_gi[0].labels, 'GPU_I_ID')!r}) were not loaded")
    ctx.notes += _missing_notes({s.name for s in series}) + promframes_pods.ksm_notes(series, pods, ctx)
    for note in ctx.notes:
        log.warning(note)
    samples.attrs["notes"] = list(ctx.notes)
    return {"devices": devices, "samples": _to_datetime(samples, "ts"), "pods": pods,
            "nodes": nodes_frame(series, set(devices["node"].dropna())),
            "pod_status": _to_datetime(status, "ts", "created_ts", "scheduled_ts"),
            "health": _to_datetime(promframes_health.health_frame(series, ctx), "ts"),
            "topology": promframes_topology.topology_frame(series),
            "processes": _to_datetime(promframes_processes.processes_frame(series), "ts"),
            "scheduler_pending": _to_datetime(promframes_queues.scheduler_pending_frame(series), "ts")}


def nodes_frame(series: list, gpu_nodes: set[str]):
    """The GPU nodes' labels from kube_node_labels (keys as kube-state-metrics names them, without
    ``label_``), one JSON object per node: what prices per node label match on."""
    import json

    import pandas as pd

    rows = {}
    for s in series:
        node = s.labels.get("node")
        if s.name == "kube_node_labels" and node in gpu_nodes:
            found = {k.removeprefix("label_"): v for k, v in s.labels.items() if k.startswith("label_") and v}
            rows[node] = json.dumps(found, sort_keys=True)
    return pd.DataFrame(sorted(rows.items()), columns=list(BUNDLE_COLUMNS["nodes"]))


def _missing_notes(names: set[str]) -> list[str]:
    """One note per samples column no generation's series fed, naming every name it accepts."""
    seen = {SAMPLE_FIELDS[n][0] for n in names if n in SAMPLE_FIELDS}
    out = []
    for f in fields.SERIES:
        if f.column and f.column not in seen:
            others = [n for n, (column, _) in SAMPLE_FIELDS.items() if column == f.column and n != f.name]
            out.append(f"no {f.name} series (nor {', '.join(others)}): {f.column} is unknown (NULL)")
    return out


def _factor(name: str) -> float:
    """Factor from the unit ``name`` is served in to the base unit."""
    return fields.NAMES[name].to_base if name in fields.NAMES else 1.0


def _identity_missing(labels) -> bool:
    """No UUID, or no node: neither a hostname label nor a scrape instance to fall back on."""
    return device_of(labels) is None


def samples_frame(series: list[Series], ctx: Context):
    """One row per (ts, device, workload), one column per field, base units, NaN = missing; a shared
    device's device-level rows folded into its pods' rows (promframes_shared)."""
    import pandas as pd

    keys: dict[tuple, int] = {}
    parts: list[tuple] = []
    for s in series:
        if s.name not in SAMPLE_FIELDS or (device := device_of(s.labels)) is None:
            continue
        column, factor = SAMPLE_FIELDS[s.name]
        ok = np.isfinite(s.values)
        k = keys.setdefault(device + workload_of(s.labels, ctx.target_pods), len(keys))
        parts.append((np.full(ok.sum(), k), s.ts[ok], column, s.values[ok] * factor, _generation_rank(s)))
    metrics = [f.column for f in fields.SERIES if f.column]
    if not parts:
        return pd.DataFrame(columns=list(BUNDLE_COLUMNS["samples"]))
    long = pd.DataFrame({"k": np.concatenate([p[0] for p in parts]), "ts": np.concatenate([p[1] for p in parts]),
                         "c": np.concatenate([np.full(len(p[1]), p[2], dtype=object) for p in parts]),
                         "v": np.concatenate([p[3] for p in parts]),
                         "g": np.concatenate([np.full(len(p[1]), p[4]) for p in parts])})
    wide = _one_reading(long, ctx).pivot(index=["k", "ts"], columns="c", values="v")
    wide = wide.reindex(columns=metrics).reset_index()
    ident = pd.DataFrame(list(keys), columns=list(SAMPLE_KEY)).astype({"mig_gi_id": "Int64"})
    out = pd.concat([ident.iloc[wide["k"].to_numpy()].reset_index(drop=True), wide.drop(columns="k")], axis=1)
    out = promframes_mig.spread(out)
    out = promframes_shared.fold(out, promframes_shared.allocations(series, ctx.target_pods), metrics)
    out = out[list(BUNDLE_COLUMNS["samples"])].sort_values(["ts", "node", "gpu_uuid", "mig_gi_id", "pod"])
    return nones(out.reset_index(drop=True), "namespace", "pod", "container")


def _generation_rank(s: Series) -> int:
    """How new the dcgm-exporter generation of a series' name and labels is (4.9's name and its
    lowercase hostname/uuid labels rank highest)."""
    name = {"1.x": 0, "4.8": 1, "4.9": 2}.get(fields.NAMES[s.name].generation, 1) if s.name in fields.NAMES else 1
    return 2 * name + ("hostname" in s.labels or "uuid" in s.labels)


def _one_reading(long, ctx: Context):
    """One reading per (row, ts, column) whatever order the series came in: where several series carry
    it (the 4.8 and 4.9 name of one field, the 4.8 and 4.9 labels of one GPU), the newest generation's,
    then the greatest value; a disagreement between them is noted (a rule applied, said)."""
    dup = long.duplicated(["k", "ts", "c"], keep=False)
    if not dup.any():
        return long
    clash = long[dup].groupby(["k", "ts", "c"])["v"].agg(lambda v: v.max() - v.min() > 1e-9 * max(abs(v.max()), 1.0))
    if clash.any():
        columns = ", ".join(sorted(set(clash[clash].index.get_level_values("c"))))
        ctx.notes.append(f"{int(clash.sum())} reading(s) ({columns}) came under two dcgm-exporter generations' names or "
                         "labels for one GPU and disagreed: the newest generation's value was kept")
    return long.sort_values(["k", "ts", "c", "g", "v"], kind="stable").drop_duplicates(["k", "ts", "c"], keep="last")


def devices_frame(series: list[Series], notes: list[str]):
    """One row per GPU / MIG instance seen on any series, with capacity and MIG placement."""
    import pandas as pd

    rows: dict[tuple, dict] = {}
    for s in series:
        if (device := device_of(s.labels)) is None or not (s.name in SAMPLE_FIELDS or s.name in DEVICE_FIELDS):
            continue
        row = rows.setdefault(device, {"node": device[0], "gpu_uuid": device[1], "mig_gi_id": device[2]})
        _fill(row, gpu_index=first(s.labels, "gpu"), gpu_model=first(s.labels, "modelName", "model_name"),
              mig_profile=first(s.labels, "GPU_I_PROFILE"))
        ok = np.isfinite(s.values)
        if ok.any():
            row[field_key(s.name)] = float(s.values[ok][np.argmax(s.ts[ok])]) * _factor(s.name)
        if s.name == "gpuwatch_mig_instance_info":
            _fill(row, mig_profile_id=first(s.labels, "profile_id"),
                  mig_placement_start=first(s.labels, "placement_start"),
                  mig_placement_size=first(s.labels, "placement_size"))
    versions = driver_versions(series)
    frame = pd.DataFrame([_capacity(r) | versions.get(r["node"], {}) for r in _with_parents(rows)],
                         columns=list(BUNDLE_COLUMNS["devices"]))
    ints = ("gpu_index", "fb_total_bytes", "mig_gi_id", "mig_profile_id", "mig_placement_start", "mig_placement_size")
    frame = nones(frame.astype({c: "Int64" for c in ints}), "node", "gpu_uuid", "gpu_model", "mig_profile",
                  "driver_version", "cuda_driver_version")
    if frame["gpu_model"].isna().any():  # dcgm-exporter 2.x has no modelName label
        notes.append("no modelName label on some GPUs (dcgm-exporter 2.x): gpu_model 'unknown', no price applies")
        frame["gpu_model"] = frame["gpu_model"].fillna("unknown")
    return frame.sort_values(["node", "gpu_index", "gpu_uuid", "mig_gi_id"]).reset_index(drop=True)


def driver_versions(series: list[Series]) -> dict[str, dict[str, str]]:
    """node -> its latest ``driver_version`` (the driver label on DCGM series, under either
    generation's name, or gpuwatch_driver_info) and ``cuda_driver_version`` (gpuwatch_driver_info)."""
    latest: dict[tuple[str, str], tuple[float, str]] = {}
    for s in series:
        if s.name == "gpuwatch_driver_info":
            found = {c: first(s.labels, c) for c in ("driver_version", "cuda_driver_version")}
        elif s.name in fields.NAMES:
            found = {"driver_version": first(s.labels, *DRIVER_LABELS)}
        else:
            continue
        node, at = node_of(s.labels), float(s.ts.max()) if len(s.ts) else -np.inf
        for column, value in found.items():
            if node and value and latest.get((node, column), (-np.inf,))[0] <= at:
                latest[(node, column)] = (at, value)
    out: dict[str, dict[str, str]] = {}
    for (node, column), (_, value) in sorted(latest.items()):
        out.setdefault(node, {})[column] = value
    return out


def _with_parents(rows: dict[tuple, dict]) -> list[dict]:
    """The rows plus one whole-GPU row per MIG-enabled GPU (docs/architecture.md#data-contract: one row per GPU, and one
    per instance); dcgm-exporter reports such a GPU only per instance, so its size is unknown."""
    whole = {(n, u) for n, u, gi in rows if gi is None}
    parents = {}
    for (node, uuid, gi), row in rows.items():
        if gi is not None and (node, uuid) not in whole:
            parents.setdefault((node, uuid, None), {"node": node, "gpu_uuid": uuid, "mig_gi_id": None,
                                                    "gpu_index": row.get("gpu_index"), "gpu_model": row.get("gpu_model")})
    return list(rows.values()) + list(parents.values())


def _fill(row: dict, **values: str | None) -> None:
    """Fill the row's unknown keys from labels; a number label that is no whole number stays unknown."""
    for key, value in values.items():
        if row.get(key) is None and value is not None:
            row[key] = series_labels.whole(value) if key != "gpu_model" and key != "mig_profile" else value


def _capacity(row: dict) -> dict:
    """fb_total_bytes: gpuwatch's own gauge, else DCGM's FB total (4.9's FB_CAPACITY_BYTES), else
    dcgm-exporter's used + free (+ reserved), in bytes (each already converted from its generation's unit)."""
    total = row.get("gpuwatch_gpu_memory_total_bytes", row.get("DCGM_FI_DEV_FB_TOTAL"))
    if total is None and "DCGM_FI_DEV_FB_USED" in row and "DCGM_FI_DEV_FB_FREE" in row:
        total = row["DCGM_FI_DEV_FB_USED"] + row["DCGM_FI_DEV_FB_FREE"] + row.get("DCGM_FI_DEV_FB_RESERVED", 0.0)
    return {c: row.get(c) for c in BUNDLE_COLUMNS["devices"]} | {"fb_total_bytes": None if total is None else round(total)}


def _mig_uuids(series: list[Series]) -> dict[tuple, str]:
    """(node, gpu_uuid, gi) -> ``MIG-…`` uuid, from gpuwatch_mig_instance_info."""
    return {device_of(s.labels): s.labels["mig_uuid"] for s in series
            if s.name == "gpuwatch_mig_instance_info" and s.labels.get("mig_uuid") and device_of(s.labels)}


def _to_datetime(frame, *columns: str):
    import pandas as pd

    for column in columns:
        ms = np.round(frame[column].to_numpy(dtype=float) * 1000.0)
        frame[column] = pd.to_datetime(pd.Series(ms, index=frame.index), unit="ms", utc=True)
    return frame
