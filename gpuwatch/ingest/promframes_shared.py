"""Shared GPUs in the samples frame: device-level rows made into the rows of the pods holding them.

An exporter serves a GPU several pods share (time-slicing, MPS) in one of three shapes
(gpuwatch/exporter/compat.py):

- **per-pod** (gpuwatch's, ``--kubernetes-virtual-gpus``): a device-level series without pod labels
  for every field, plus each pod's own GPU_UTIL / FB_USED with its labels; the device's series then
  carries the unattributed remainder of those two fields;
- **one-pod** (dcgm-exporter's default): one series, labelled with one of the sharers;
- **duplicated** (dcgm-exporter's ``--kubernetes-virtual-gpus``): every pod's series carries every
  device-wide value.

The store keeps one row per (ts, device, pod), so at each (ts, device) that has pod rows:
a device-level row (no pod) lends its values to the pod rows' missing fields and is dropped (its
remainder is nobody's: that is the unattributed part of a shared GPU); and the pods that
``gpuwatch_gpu_allocation_info`` lists as holding the device at that instant but that have no row
get the device-level values — from the device-level row, or, in the one-pod shape, from the one
pod row there is. Profiling fields (SM, tensor and DRAM activity, NVLink traffic) are then
unknown on the rows of a device several pods hold at that instant: they are the pods' work together,
no one pod's (NVML and DCGM have no per-process activity). Without ``gpuwatch_gpu_allocation_info``
(plain dcgm-exporter) the rows stay as served. Pure pandas, no I/O.
"""

from __future__ import annotations

import numpy as np

from gpuwatch import fields
from gpuwatch.ingest.series import Series, device_of, workload_of

# the samples columns of profiling fields: one value per device, whatever the pods on it do
ACTIVITY = tuple(f.column for f in fields.FIELDS if f.profiling and f.column)
DEVICE = ["node", "gpu_uuid", "mig_gi_id"]
AT = ["ts", *DEVICE]
POD = ["namespace", "pod", "container"]


def allocations(series: list[Series], target_pods: frozenset):
    """(ts, node, gpu_uuid, mig_gi_id, namespace, pod, container) per instant a pod holds a device,
    from ``gpuwatch_gpu_allocation_info`` (each pod's first container); empty frame if none."""
    import pandas as pd

    parts = []
    for s in series:
        if s.name != "gpuwatch_gpu_allocation_info" or (device := device_of(s.labels)) is None:
            continue
        ns, pod, container = workload_of(s.labels, target_pods)
        ok = np.isfinite(s.values) & (s.values > 0)
        if pod is None or not ok.any():
            continue
        parts.append(pd.DataFrame({"ts": s.ts[ok], "node": device[0], "gpu_uuid": device[1], "mig_gi_id": device[2],
                                   "namespace": ns, "pod": pod, "container": container}))
    if not parts:
        return pd.DataFrame({"ts": np.array([], dtype=float)} | {c: [] for c in [*DEVICE, *POD]}).astype(
            {"mig_gi_id": "Int64", "node": object, "gpu_uuid": object, **dict.fromkeys(POD, object)})
    frame = pd.concat(parts, ignore_index=True).astype({"mig_gi_id": "Int64"})
    return frame.sort_values([*AT, *POD]).drop_duplicates([*AT, "namespace", "pod"])


def fold(samples, alloc, metrics: list[str]):
    """``samples`` (one row per (ts, device, pod), ``pod`` None on device-level rows) with the
    device-level rows of shared devices folded into their pods' rows (module docstring)."""
    import pandas as pd

    shared = _shared_devices(samples, alloc)
    if shared.empty:
        return samples
    inside = samples.merge(shared, on=DEVICE, how="left", indicator=True)["_merge"].eq("both").to_numpy()
    rest, samples = samples[~inside], samples[inside]
    has_pod = samples["pod"].notna()
    device_rows = samples[~has_pod]
    pod_rows = samples[has_pod]
    held = pd.concat([pod_rows[AT], alloc[AT]]).drop_duplicates().astype({"mig_gi_id": "Int64"})
    lenders = device_rows.merge(held, on=AT)  # device-level rows where pods hold the device
    single = _one_pod_lenders(pod_rows, alloc, lenders)
    lenders = pd.concat([lenders, single], ignore_index=True)
    filled = _fill_from(pod_rows, device_rows, metrics)
    missing = _missing_pods(filled, alloc, lenders, metrics)
    kept_device = device_rows.merge(held, on=AT, how="left", indicator=True)
    kept_device = kept_device[kept_device["_merge"] == "left_only"].drop(columns="_merge")
    out = pd.concat([rest, filled, missing, kept_device], ignore_index=True)
    who = [*AT, "namespace", "pod"]
    return _unknown_activity(out[list(samples.columns)], pd.concat([pod_rows[who], alloc[who]]))


def _unknown_activity(out, holders):
    """Profiling fields (SM, tensor, DRAM activity, NVLink traffic) are the device's, both pods' work
    together: on the rows of a device several pods hold at that instant they are no pod's, so unknown
    (NaN), never the neighbour's (a one-SM spin kernel beside a matmul reads the matmul's 0.4 on a real
    H100, tests/test_real_h100.py). A pod alone on its device keeps them."""
    columns = [c for c in ACTIVITY if c in out.columns]
    count = holders.astype({"mig_gi_id": "Int64"}).drop_duplicates().groupby(AT, dropna=False).size()
    several = count[count > 1].reset_index()[AT]
    if several.empty or not columns:
        return out
    hit = out[AT].astype({"mig_gi_id": "Int64"}).merge(several.assign(_several=True), on=AT, how="left")["_several"]
    mask = hit.fillna(False).astype(bool).to_numpy() & out["pod"].notna().to_numpy()
    out.loc[mask, columns] = float("nan")
    return out


def _shared_devices(samples, alloc):
    """The devices this applies to: served with a device-level row beside pod rows, or held by
    several pods at once."""
    import pandas as pd

    both = samples.assign(p=samples["pod"].notna()).groupby(DEVICE, dropna=False)["p"].agg(["any", "all"])
    mixed = both[both["any"] & ~both["all"]].reset_index()[DEVICE]
    holders = alloc.groupby(AT, dropna=False).size()
    several = holders[holders > 1].reset_index()[DEVICE]
    return pd.concat([mixed, several]).drop_duplicates().astype({"mig_gi_id": "Int64"})


def _fill_from(pod_rows, device_rows, metrics: list[str]):
    """Pod rows with their missing fields taken from the device-level row at the same (ts, device)."""
    if device_rows.empty:
        return pod_rows
    lend = device_rows[AT + metrics].rename(columns={m: f"{m}__device" for m in metrics})
    merged = pod_rows.merge(lend, on=AT, how="left")
    for m in metrics:
        merged[m] = merged[m].fillna(merged.pop(f"{m}__device"))
    return merged


def _one_pod_lenders(pod_rows, alloc, lenders):
    """In the one-pod shape, the single pod row at a (ts, device) where other holders have none."""
    if alloc.empty or pod_rows.empty:
        return pod_rows.iloc[0:0]
    count = pod_rows.groupby(AT, dropna=False).size().rename("rows").reset_index()
    holders = alloc.groupby(AT, dropna=False).size().rename("holders").reset_index()
    single = count[count["rows"] == 1].merge(holders[holders["holders"] > 1], on=AT)[AT]
    single = single.merge(lenders[AT], on=AT, how="left", indicator=True)
    single = single[single["_merge"] == "left_only"].drop(columns="_merge")
    return pod_rows.merge(single, on=AT).assign(namespace=None, pod=None, container=None)


def _missing_pods(filled, alloc, lenders, metrics: list[str]):
    """One row per pod holding a device at ts without a row of its own, with the lender's values."""
    if alloc.empty or lenders.empty:
        return filled.iloc[0:0]
    absent = alloc.merge(filled[[*AT, "namespace", "pod"]], on=[*AT, "namespace", "pod"], how="left", indicator=True)
    absent = absent[absent["_merge"] == "left_only"].drop(columns="_merge")
    return absent.merge(lenders[AT + metrics], on=AT)
