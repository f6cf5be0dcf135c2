"""Schedulable capacity finisher: free-block figures per bucket and pool from the SQL's records.

Per (bucket, node) the SQL gives the free whole GPUs and their mask; the exact block searches
(gpuwatch.topology) run once per distinct (node layout, free mask) and the figures are summed per
pool (gpu_model). Block figures cover nodes whose topology is fully known (``topology_known_gpus``
says how many GPUs that is); the plain counts (``free_gpus``, ``jobs_k``) cover every node.
``node_blocks`` is the app's per-node view at one instant (docs/architecture.md#topology).
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd

from gpuwatch import topology
from gpuwatch.analyses import node_layouts

COLUMNS = ("bucket_ts", "gpu_model", "nodes", "gpus", "free_gpus", "largest_nvlink_block", "largest_numa_block",
           "largest_pcie_switch_block", "jobs_1", "jobs_2", "jobs_4", "jobs_8", "nvlink_jobs_1", "nvlink_jobs_2",
           "nvlink_jobs_4", "nvlink_jobs_8", "topology_known_gpus")
MAXES = ("largest_nvlink_block", "largest_numa_block", "largest_pcie_switch_block")
BLOCKS = (*MAXES, *(f"nvlink_jobs_{k}" for k in topology.BLOCK_SIZES))
SUMS = ("nodes", "gpus", "free_gpus", *(f"jobs_{k}" for k in topology.BLOCK_SIZES), "topology_known_gpus",
        "judged", "numa_judged", *(f"nvlink_jobs_{k}" for k in topology.BLOCK_SIZES))


def finish(con: Any, frame: pd.DataFrame, params: dict) -> pd.DataFrame:
    """One row per bucket x pool (columns ``COLUMNS``)."""
    spans = node_free(frame)
    seconds = float(params["capacity_bucket_seconds"])
    start = pd.Timestamp(params["start"])
    count = math.ceil((pd.Timestamp(params["end"]) - start).total_seconds() / seconds)
    if not len(spans) or count <= 0:
        return pd.DataFrame(columns=list(COLUMNS))
    spans["nodes"] = 1
    for k in topology.BLOCK_SIZES:
        spans[f"jobs_{k}"] = spans["free_gpus"] // k
    spans["topology_known_gpus"] = spans["gpus"].where(spans["judged"], 0)
    spans["numa_judged"] = spans["judged"] & spans["largest_numa_block"].notna()
    stamps = start.tz_localize(None) + pd.to_timedelta(np.arange(count) * seconds, unit="s")
    pools = [_pool(group, count).assign(bucket_ts=stamps, gpu_model=model)
             for model, group in spans.groupby("gpu_model", sort=True, dropna=False)]
    out = pd.concat(pools, ignore_index=True).sort_values(["bucket_ts", "gpu_model"], kind="stable")
    for name in COLUMNS[2:]:
        out[name] = out[name].round().astype("Int64")
    return out[list(COLUMNS)].reset_index(drop=True)


def _pool(spans: pd.DataFrame, count: int) -> pd.DataFrame:
    """Per bucket, the pool's sums (running totals over its nodes' runs) and maxima; block figures
    NA in buckets where none of its nodes is judged."""
    lo, hi = spans["bucket_from"].to_numpy(dtype=np.int64), spans["bucket_to"].to_numpy(dtype=np.int64)
    out = {}
    for name in SUMS:
        change = np.zeros(count + 1)
        values = spans[name].fillna(0).to_numpy(dtype=float)
        np.add.at(change, lo, values)
        np.add.at(change, hi, -values)
        out[name] = np.cumsum(change)[:count]
    for name in MAXES:
        best = np.full(count, np.nan)
        for a, b, v in zip(lo, hi, spans[name].to_numpy(dtype=float), strict=True):
            if not np.isnan(v):
                best[a:b] = np.fmax(best[a:b], v)
        out[name] = best
    pool = pd.DataFrame(out)
    unjudged = pool["judged"] == 0
    for name in BLOCKS:
        pool.loc[unjudged, name] = np.nan
    pool.loc[pool["numa_judged"] == 0, "largest_numa_block"] = np.nan
    return pool


def node_free(frame: pd.DataFrame) -> pd.DataFrame:
    """The SQL's runs of a node's free set (bucket_from, bucket_to), each with ``judged`` (topology
    known, free set known) and the block figures of its free mask (NA where not judged)."""
    layout_of = node_layouts.nodes(frame)
    free = node_layouts.records(frame, "free")[["node", "gpu_model", "gpus", "free_gpus", "free_mask", "unplaced",
                                                 "bucket_from", "bucket_to", "bucket_ts"]].copy()
    known = {name for name, n in layout_of.items() if n.known}
    free["judged"] = free["node"].isin(known) & free["free_mask"].notna() & (free["unplaced"] == 0)
    distinct = free.loc[free["judged"], ["node", "free_mask"]].drop_duplicates()
    figures = [{"node": node, "free_mask": mask, **node_layouts.stats(layout_of[node].layout, int(mask))}
               for node, mask in zip(distinct["node"], distinct["free_mask"], strict=True)]
    table = pd.DataFrame(figures, columns=["node", "free_mask", *BLOCKS])
    return free.merge(table, on=["node", "free_mask"], how="left")


def node_blocks(con: Any, at: Any, params: dict) -> list[dict]:
    """Per node at instant ``at``: its GPUs (gpu_index, gpu_uuid, allocated_to ns/pod or None,
    numa_node), the link matrix by GPU index, and the largest free blocks (GPU indices) per class
    (NVLink, one NUMA node, one PCIe switch); ``topology_known`` False where a pair is unknown."""
    from gpuwatch import analyses

    start = pd.Timestamp(at).to_pydatetime()
    bound = {"start": start, "end": start + timedelta(seconds=float(params["capacity_bucket_seconds"])),
             "capacity_bucket_seconds": float(params["capacity_bucket_seconds"])}
    frame = con.execute(analyses.sql("schedulable_capacity"), bound).df()
    layout_of = node_layouts.nodes(frame)
    holders = {(node, i): pod for node, pods in node_layouts.holders(frame, pd.Timestamp(start)).items()
               for pod, mask in sorted(pods.items()) for i in range(mask.bit_length()) if mask >> i & 1}
    free = {r.node: r for r in node_layouts.records(frame, "free").itertuples(index=False) if r.bucket_from == 0}
    gpus = node_layouts.records(frame, "gpu").sort_values(["node", "position"])
    out = []
    for name, node in layout_of.items():
        rows = gpus[gpus["node"] == name]
        state = free.get(name)
        mask = int(state.free_mask) if state is not None and pd.notna(state.free_mask) else 0
        blocks = {}
        if node.known and (state is None or state.unplaced == 0):
            layout = node.layout
            blocks = {"nvlink": node.label_gpus(layout.largest_block(mask)),
                      "numa": node.label_gpus(layout.largest_block(mask, max_rank=node_layouts.NODE_RANK, same_numa=True)),
                      "pcie_switch": node.label_gpus(layout.largest_block(mask, max_rank=node_layouts.PIX_RANK))}
        out.append({
            "node": name, "gpu_model": node.gpu_model, "topology_known": node.known,
            "free_gpus": int(state.free_gpus) if state is not None else None,
            "gpus": [{"gpu_index": node.index(int(p)), "gpu_uuid": u, "allocated_to": holders.get((name, int(p))),
                      "numa_node": node_layouts.value(n)}
                     for p, u, n in zip(rows["position"], rows["gpu_uuid"], rows["numa_node"], strict=True)],
            "links": node.link_matrix(node.full), "free_blocks": blocks})
    return out
