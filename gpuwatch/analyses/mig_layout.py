"""MIG slice map finisher: expand each MIG GPU's instances to its 8 memory slices.

States per slice: ``in use`` (an instance a pod holds), ``idle instance`` (an instance nobody
holds), ``free`` (no instance; some demanded profile fits) and ``stranded`` (no instance and no
demanded profile can be placed there). In the repack layout each instance carries the pod that
holds it now and ``moved_from`` (its current ``name@start`` when the repack moves it; gpuwatch.mig.moves). In-use flags, the demand mix and the repack come from
``mig_fragmentation`` (parsed from its ``name@start`` descriptions, gpuwatch.mig.describe's
format), so the map and the fragmentation table agree by construction.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuwatch import analyses, mig

COLUMNS = ("node", "gpu_uuid", "gpu_model", "layout", "slice", "state", "instance", "label", "namespace", "pod",
           "moved_from", "gpu_index")


def finish(con: Any, frame: pd.DataFrame, params: dict) -> pd.DataFrame:
    """One row per (MIG GPU, layout = current | repack, memory slice).

    ``params["fragmentation"]``, when given, is mig_fragmentation's result for the same window
    (a caller that already has it saves running the placement search twice).
    """
    if frame.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    given = params.get("fragmentation")
    fragmentation = given if given is not None else analyses.run(
        con, "mig_fragmentation", **{k: v for k, v in params.items() if k != "fragmentation"})
    fragmentation = fragmentation.set_index(["node", "gpu_uuid"])
    rows: list[dict] = []
    for (node, gpu_uuid), gpu in frame.groupby(["node", "gpu_uuid"], sort=True):
        if (node, gpu_uuid) not in fragmentation.index:
            continue
        summary = fragmentation.loc[(node, gpu_uuid)]
        if summary["problem"] and pd.isna(summary["free_slices"]):
            continue  # mig_fragmentation says why (bad placement table); nothing to draw
        names = _names(gpu)
        current = _current(gpu, summary, names)
        rows += current + _repack(gpu, summary, names, current)
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    # the profile name on an instance's first slice only, so a map can label each instance once
    first = out["instance"].notna() & (out["slice"] == out["instance"].str.rsplit("@", n=1).str[-1].astype(float))
    out["label"] = out["instance"].str.rsplit("@", n=1).str[0].where(first, "")
    return out


def _names(gpu: pd.DataFrame) -> dict[str, int]:
    """Profile name -> id on this GPU (its own instances first, else the name parser)."""
    known = gpu.dropna(subset=["mig_profile", "mig_profile_id"])
    return {str(n): int(i) for n, i in zip(known["mig_profile"], known["mig_profile_id"], strict=True)}


def _profile_id(name: str, names: dict[str, int], gpu_memory_bytes: float | None) -> int:
    return names[name] if name in names else mig.parse_profile(name, gpu_memory_bytes=gpu_memory_bytes)


def _parse(description: Any, names: dict[str, int], memory: float | None) -> list[tuple[str, mig.Placement]]:
    """``3g.40gb@0,1g.10gb@5`` -> [(label, Placement)]."""
    out = []
    for part in str(description or "").split(","):
        if "@" in part:
            name, start = part.strip().rsplit("@", 1)
            out.append((part.strip(), mig.Placement(_profile_id(name, names, memory), int(start))))
    return out


def _demand(mix: Any, names: dict[str, int], memory: float | None) -> set[int]:
    """Profile ids of the demand mix (``1g.10gb:0.55,3g.40gb:0.31``); no demand = any profile."""
    text = str(mix or "").split(" (ignored", 1)[0]
    if not text or text.startswith("(no MIG pods"):
        return set(mig.PROFILES)
    ids = set()
    for part in text.split(","):
        try:
            ids.add(_profile_id(part.split(":", 1)[0].strip(), names, memory))
        except ValueError:
            continue
    return ids or set(mig.PROFILES)


def _gpu_memory(gpu: pd.DataFrame) -> float | None:
    sized = gpu.dropna(subset=["fb_total_bytes", "mig_placement_size"])
    sized = sized[sized["mig_placement_size"] > 0]
    return None if sized.empty else float(sized["fb_total_bytes"].iloc[0] * mig.MEMORY_SLICES / sized["mig_placement_size"].iloc[0])


def _current(gpu: pd.DataFrame, summary: pd.Series, names: dict[str, int]) -> list[dict]:
    memory = _gpu_memory(gpu)
    layout = _parse(summary["instances"], names, memory)
    in_use = {label for label, _ in _parse(summary["in_use"], names, memory)}
    stranded = set(mig.stranded_slices([p for _, p in layout], _demand(summary["demand_mix"], names, memory)))
    holders = {(int(s), str(n)): (ns, pod) for s, n, ns, pod in
               zip(gpu["mig_placement_start"].fillna(-1), gpu["mig_profile"], gpu["namespace"], gpu["pod"], strict=True)}
    base = {"node": gpu["node"].iloc[0], "gpu_uuid": gpu["gpu_uuid"].iloc[0], "gpu_model": gpu["gpu_model"].iloc[0],
            "gpu_index": gpu["gpu_index"].iloc[0], "layout": "current", "moved_from": None}
    rows = []
    for slice_ in range(mig.MEMORY_SLICES):
        owner = next(((label, p) for label, p in layout if p.mask >> slice_ & 1), None)
        if owner is None:
            state = "stranded" if slice_ in stranded else "free"
            rows.append({**base, "slice": slice_, "state": state, "instance": None, "namespace": None, "pod": None})
            continue
        label, placement = owner
        namespace, pod = holders.get((placement.start, label.rsplit("@", 1)[0]), (None, None))
        state = "in use" if label in in_use else "idle instance"
        rows.append({**base, "slice": slice_, "state": state, "instance": label,
                     "namespace": namespace if state == "in use" else None, "pod": pod if state == "in use" else None})
    return rows


def _repack(gpu: pd.DataFrame, summary: pd.Series, names: dict[str, int], current: list[dict]) -> list[dict]:
    memory = _gpu_memory(gpu)
    layout = _parse(summary["repack_layout"], names, memory)
    stranded = set(mig.stranded_slices([p for _, p in layout], _demand(summary["demand_mix"], names, memory)))
    in_use = _parse(summary["in_use"], names, memory)
    holders = {r["instance"]: (r["namespace"], r["pod"]) for r in current if r["state"] == "in use"}
    label_of = {p: label for label, p in in_use}
    moved = {to: label_of[src] for src, to in mig.moves([p for _, p in in_use], [p for _, p in layout])}
    base = {"node": gpu["node"].iloc[0], "gpu_uuid": gpu["gpu_uuid"].iloc[0], "gpu_model": gpu["gpu_model"].iloc[0],
            "gpu_index": gpu["gpu_index"].iloc[0], "layout": "repack"}
    rows = []
    for slice_ in range(mig.MEMORY_SLICES):
        owner = next(((label, p) for label, p in layout if p.mask >> slice_ & 1), None)
        if owner is None:
            rows.append({**base, "slice": slice_, "state": "stranded" if slice_ in stranded else "free",
                         "instance": None, "namespace": None, "pod": None, "moved_from": None})
            continue
        label, placement = owner
        source = moved.get(placement, label)  # not moved: the instance stays where it is
        namespace, pod = holders.get(source, (None, None))
        rows.append({**base, "slice": slice_, "state": "in use", "instance": label, "namespace": namespace, "pod": pod,
                     "moved_from": source if placement in moved else None})
    return rows
