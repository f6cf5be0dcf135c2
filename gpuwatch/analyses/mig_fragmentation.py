"""MIG fragmentation finisher: runs gpuwatch.mig's placement search over the SQL's records.

The SQL yields three record kinds: ``instance`` (one per MIG GPU instance, with ``in_use`` from
its last sample in the window, NULL when it has none), ``demand`` (MIG pods in the window per node
and profile name) and ``running`` (those still running at the window's end). One row per MIG GPU
comes out; a GPU whose instances break the placement table gets its ``problem`` and no numbers.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import pandas as pd

from gpuwatch import mig

COLUMNS = ("node", "gpu_uuid", "gpu_model", "free_slices", "stranded_slices", "stranded_fraction",
           "instances", "in_use", "demand_mix", "repack_layout", "repack_moves", "repack_fits",
           "repack_stranded_slices", "allocation_source", "problem")
_FIELDS = ("node", "gpu_uuid", "gpu_index", "gpu_model", "mig_gi_id", "mig_profile", "mig_profile_id",
           "mig_placement_start", "mig_placement_size", "in_use")
_INTS = ("free_slices", "stranded_slices", "repack_moves", "repack_stranded_slices")


def finish(con: Any, frame: pd.DataFrame, params: dict) -> pd.DataFrame:
    """One row per MIG GPU (columns ``COLUMNS``), sorted by node and GPU."""
    instances = frame[frame["kind"] == "instance"]
    resolver = _Resolver(instances)
    demand, ignored = _demand(frame[frame["kind"] == "demand"], resolver)
    # plain records, grouped in Python: per-group pandas indexing costs ~3 ms a GPU
    records = sorted(_records(instances), key=lambda r: (r["node"], r["gpu_uuid"]))
    in_use = _in_use(records, frame[frame["kind"] == "running"], resolver)
    mix = _describe_mix(demand, ignored, resolver)
    rows = [_gpu_row(list(gpu), in_use, demand, mix=mix, resolver=resolver)
            for _, gpu in itertools.groupby(records, key=lambda r: (r["node"], r["gpu_uuid"]))]
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    for name in _INTS:
        out[name] = out[name].astype("Int64")
    out["repack_fits"] = out["repack_fits"].astype("boolean")
    return out


def fleet_total(frame: pd.DataFrame) -> dict:
    """Fleet totals of a ``finish`` result (GPUs whose layout could not be read are counted apart)."""
    ok = frame[frame["free_slices"].notna()]
    gpus = len(ok)
    stranded = int(ok["stranded_slices"].sum()) if gpus else 0
    return {"gpus": gpus, "gpus_with_problems": len(frame) - gpus,
            "free_slices": int(ok["free_slices"].sum()) if gpus else 0, "stranded_slices": stranded,
            "stranded_fraction": stranded / (mig.MEMORY_SLICES * gpus) if gpus else 0.0,
            "repack_moves": int(ok["repack_moves"].sum()) if gpus else 0}


class _Resolver:
    """Profile names -> ids, learned from the devices' own (name, id) pairs per GPU model first."""

    def __init__(self, instances: pd.DataFrame):
        known = instances.dropna(subset=["mig_profile", "mig_profile_id"])
        pairs = zip(known["gpu_model"], known["mig_profile"], known["mig_profile_id"], strict=True)
        self._ids = {(m, n): int(i) for m, n, i in pairs}
        sized = instances.dropna(subset=["fb_total_bytes", "mig_placement_size"])
        sized = sized[sized["mig_placement_size"] > 0]
        memory = sized["fb_total_bytes"] * mig.MEMORY_SLICES / sized["mig_placement_size"]
        self._memory = dict(zip(sized["node"], memory, strict=True))  # node -> whole-GPU memory (bytes)
        self.model = dict(zip(instances["node"], instances["gpu_model"], strict=True))

    def profile_id(self, node: str, name: str) -> int:
        """Raises ValueError when the name cannot be placed in the 8-slice table."""
        if (self.model.get(node), name) in self._ids:
            return self._ids[(self.model.get(node), name)]
        return mig.parse_profile(name, gpu_memory_bytes=self._memory.get(node))

    def names_by_id(self, model: str | None) -> dict[int, str]:
        return {i: n for (m, n), i in sorted(self._ids.items()) if m == model}


def _demand(records: pd.DataFrame, resolver: _Resolver) -> tuple[Counter, Counter]:
    """Requested instances per profile id over the fleet, and the names that could not be placed."""
    demand: Counter = Counter()
    ignored: Counter = Counter()
    for node, name, count in zip(records["node"], records["mig_profile"], records["instances"], strict=True):
        try:
            demand[resolver.profile_id(node, name)] += float(count)
        except ValueError:
            ignored[name] += float(count)
    return demand, ignored


def _records(frame: pd.DataFrame) -> list[dict]:
    columns = [frame[c].tolist() for c in _FIELDS]
    return [dict(zip(_FIELDS, values, strict=True)) for values in zip(*columns, strict=True)]


def _in_use(instances: list[dict], running: pd.DataFrame, resolver: _Resolver) -> dict[tuple, tuple[bool, str]]:
    """(node, gpu_uuid, gi id) -> (in use, source): the last sample, else the node's running pods."""
    left: Counter = Counter()
    for node, name, count in zip(running["node"], running["mig_profile"], running["instances"], strict=True):
        try:
            left[(node, resolver.profile_id(node, name))] += round(float(count))
        except ValueError:
            continue
    out: dict[tuple, tuple[bool, str]] = {}
    for row in instances:
        if not pd.isna(row["in_use"]):
            out[(row["node"], row["gpu_uuid"], row["mig_gi_id"])] = (bool(row["in_use"]), "samples")
            left[(row["node"], _int(row["mig_profile_id"]))] -= bool(row["in_use"])
    # instances without samples take the node's remaining running pods, in GPU then slice order
    order = sorted(instances, key=lambda r: (r["node"], _int(r["gpu_index"]) or 0,
                                             _int(r["mig_placement_start"]) or 0))
    for row in order:
        key, profile = (row["node"], row["gpu_uuid"], row["mig_gi_id"]), (row["node"], _int(row["mig_profile_id"]))
        if key not in out:
            out[key] = (left[profile] > 0, "pods")
            left[profile] -= left[profile] > 0
    return out


def _int(value: Any) -> int | None:
    return None if pd.isna(value) else int(value)


def _describe_mix(demand: Counter, ignored: Counter, resolver: _Resolver) -> str:
    names = {i: n for m in set(resolver.model.values()) for i, n in resolver.names_by_id(m).items()}
    total = sum(demand.values()) + sum(ignored.values())
    if not demand:
        text = "(no MIG pods in window: any profile)"
    else:
        text = ",".join(f"{names.get(i, mig.PROFILES[i].label)}:{n / total:.2f}" for i, n in demand.most_common())
    if ignored:
        text += " (ignored: " + ",".join(f"{n}×{c:g}" for n, c in sorted(ignored.items())) + ")"
    return text


def _gpu_row(gpu: list[dict], in_use: dict, demand: Counter, *, mix: str, resolver: _Resolver) -> dict:
    first = gpu[0]
    row = {"node": first["node"], "gpu_uuid": first["gpu_uuid"], "gpu_model": first["gpu_model"],
           "demand_mix": mix, "problem": ""}
    flags = [in_use[(r["node"], r["gpu_uuid"], r["mig_gi_id"])] for r in gpu]
    row["allocation_source"] = "+".join(sorted({source for _, source in flags}))
    wanted = dict(demand) or dict.fromkeys(mig.PROFILES, 1.0)  # no demand seen: any profile will do
    try:
        layout, used, note = _layout(gpu, [f for f, _ in flags], wanted)
    except ValueError as err:
        row["problem"] = f"{first['gpu_uuid']} on {first['node']}: {err}"
        return row
    names = resolver.names_by_id(first["gpu_model"])
    stranded = mig.stranded_slices(layout, wanted)
    plan = mig.repack(used, wanted)
    row.update(free_slices=len(mig.free_slices(layout)), stranded_slices=len(stranded),
               stranded_fraction=len(stranded) / mig.MEMORY_SLICES, instances=mig.describe(layout, names),
               in_use=mig.describe(used, names), repack_layout=mig.describe(plan.layout, names),
               repack_moves=plan.moves, repack_fits=plan.fits, repack_stranded_slices=len(plan.stranded),
               problem=note)
    return row


def _layout(gpu: list[dict], flags: list[bool], wanted: dict) -> tuple[mig.Layout, mig.Layout, str]:
    """The GPU's placements, those in use, and a note; unknown placements take the best case."""
    ids = [_profile(r) for r in gpu]
    starts = [_int(r["mig_placement_start"]) for r in gpu]
    if None in starts:
        layout = mig.best_case(ids, wanted)
        used = _first_of_each(layout, Counter(pid for pid, f in zip(ids, flags, strict=True) if f))
        return layout, used, "placement unknown: best case shown (stranded is a lower bound)"
    placements = [mig.Placement(pid, s) for pid, s in zip(ids, starts, strict=True)]
    layout = mig.check(placements)
    return layout, tuple(sorted(p for p, f in zip(placements, flags, strict=True) if f)), ""


def _profile(r: dict) -> int:
    """The instance's profile id, checked against the table (other GPUs, e.g. A30, differ)."""
    pid, size = _int(r["mig_profile_id"]), _int(r["mig_placement_size"])
    if pid not in mig.PROFILES:
        raise ValueError(f"MIG instance {r['mig_gi_id']} ({r['mig_profile']}) has profile id {pid}, "
                         "not in the A100/H100/H200 table")
    if size is not None and size != mig.PROFILES[pid].size:
        raise ValueError(f"MIG instance {r['mig_gi_id']}: placement size {size} does not match "
                         f"profile {pid} (size {mig.PROFILES[pid].size})")
    return pid


def _first_of_each(layout: mig.Layout, counts: Counter) -> mig.Layout:
    out = []
    for placement in layout:
        if counts[placement.profile_id] > 0:
            counts[placement.profile_id] -= 1
            out.append(placement)
    return tuple(out)
