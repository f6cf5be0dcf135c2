"""Node layouts from the topology analyses' records (shared by their finishers; no SQL of its own).

The topology SQL files (schedulable_capacity, topology_placement, blocked_demand) emit ``gpu`` records
(node, position, gpu_uuid, gpu_index, gpu_model, numa_node) and ``link`` records (node, position,
peer_position, link, nvlinks); here they become one ``gpuwatch.topology.Layout`` per node, GPUs in
position order, so the SQL's bit masks index the layout directly. A node is judged on its links only
when every pair is known and it holds at most ``MAX_GPUS`` GPUs (the searches are exact); anything
else is "topology unknown" (docs/architecture.md#topology).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import pandas as pd

from gpuwatch import topology

MAX_GPUS = 16  # exact block searches enumerate subsets: nodes hold 8 (HGX) or 4 (GB200 tray)
PIX_RANK = topology.rank("PIX")
NODE_RANK = topology.rank("NODE")


@dataclass(frozen=True)
class Node:
    name: str
    gpu_model: str | None
    layout: topology.Layout
    indices: tuple[int | None, ...]   # gpu_index per position
    clique: tuple[str | None, ...]    # nvlink_clique per position (None unknown)
    known: bool                       # every pair's link is known and the searches are exact

    @property
    def full(self) -> int:
        return (1 << self.layout.size) - 1

    def label_gpus(self, mask: int) -> str:
        return ",".join(str(self.index(i)) for i in self.layout.members(mask))

    def index(self, position: int) -> int | str:
        value = self.indices[position]
        return position if value is None or pd.isna(value) else int(value)

    def link_matrix(self, mask: int) -> str:
        """JSON {"0-1": "NV18", ...} over the block's pairs by GPU index (null: unknown)."""
        members = self.layout.members(mask)
        out = {}
        for a, i in enumerate(members):
            for j in members[a + 1:]:
                r = self.layout.ranks[i][j]
                out[f"{self.index(i)}-{self.index(j)}"] = (
                    None if r is None else topology.label(topology.LINKS[r], self.layout.nvlinks[i][j]))
        return json.dumps(out)


def records(frame: pd.DataFrame, kind: str) -> pd.DataFrame:
    return frame[frame["kind"] == kind]


def nodes(frame: pd.DataFrame) -> dict[str, Node]:
    """One ``Node`` per node with whole GPUs, from the frame's gpu and link records."""
    gpus = records(frame, "gpu").sort_values(["node", "position"])
    links: dict[str, list[tuple[str, str, str, int | None]]] = {}
    uuid = dict(zip(zip(gpus["node"], gpus["position"], strict=True), gpus["gpu_uuid"], strict=True))
    for r in records(frame, "link").itertuples(index=False):
        pair = uuid.get((r.node, r.position)), uuid.get((r.node, r.peer_position))
        if None not in pair:
            count = None if pd.isna(r.nvlinks) else int(r.nvlinks)
            links.setdefault(r.node, []).append((pair[0], pair[1], r.link, count))
    has_clique = "nvlink_clique" in gpus
    out = {}
    for name, group in gpus.groupby("node", sort=True):
        numa = {u: (None if pd.isna(n) else int(n)) for u, n in zip(group["gpu_uuid"], group["numa_node"], strict=True)}
        layout = topology.Layout.build(list(group["gpu_uuid"]), links.get(name, []), numa)
        known = layout.size <= MAX_GPUS and all(
            layout.ranks[i][j] is not None for i in range(layout.size) for j in range(i + 1, layout.size))
        cliques = tuple((None if pd.isna(c) else str(c)) for c in group["nvlink_clique"]) if has_clique else (
            (None,) * layout.size)
        models = group["gpu_model"].dropna()
        out[name] = Node(name=name, gpu_model=models.min() if len(models) else None, layout=layout,
                         indices=tuple(group["gpu_index"]), clique=cliques, known=known)
    return out


@lru_cache(maxsize=65536)
def stats(layout: topology.Layout, free: int) -> dict[str, int | None]:
    """Free-block figures of one node layout and free mask (memoized: fleets repeat both)."""
    numa_known = all(n is not None for n in layout.numa)
    out: dict[str, int | None] = {
        "largest_nvlink_block": layout.largest_block(free).bit_count(),
        "largest_numa_block": (layout.largest_block(free, max_rank=NODE_RANK, same_numa=True).bit_count()
                               if numa_known else None),
        "largest_pcie_switch_block": layout.largest_block(free, max_rank=PIX_RANK).bit_count(),
    }
    for k in topology.BLOCK_SIZES:
        out[f"nvlink_jobs_{k}"] = topology.disjoint_blocks(layout, free, k)
    return out


def holders(frame: pd.DataFrame, at: pd.Timestamp) -> dict[str, dict[str, int]]:
    """node -> {namespace/pod: mask of its GPUs} for the ``alloc`` records live at ``at``
    (start_ts <= at < end_ts)."""
    out: dict[str, dict[str, int]] = {}
    allocs = records(frame, "alloc")
    start, end = pd.to_datetime(allocs["start_ts"]), pd.to_datetime(allocs["end_ts"])
    live = allocs[(start <= at).to_numpy() & (end.isna() | (end > at)).to_numpy()]  # the live ones, vectorised
    for node, namespace, pod, mask in zip(live["node"], live["namespace"], live["pod"], live["mask"], strict=True):
        pods = out.setdefault(node, {})
        key = f"{namespace}/{pod}"
        pods[key] = pods.get(key, 0) | int(mask)
    return out


def value(x: Any) -> Any:
    """A cell as a plain Python value (NaN/NA -> None)."""
    return None if x is None or (not isinstance(x, str) and pd.isna(x)) else x
