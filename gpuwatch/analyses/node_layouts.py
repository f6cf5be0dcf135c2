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
    """One ``Node`` per node with whole GPUs, from the frame's gpu and link records (plain lists: a
    fleet's records are thousands of rows, read once)."""
    gpus = records(frame, "gpu").sort_values(["node", "position"])
    column = {name: gpus[name].tolist() for name in ("node", "position", "gpu_uuid", "numa_node", "gpu_index",
                                                     "gpu_model")}
    clique = gpus["nvlink_clique"].tolist() if "nvlink_clique" in gpus else [None] * len(gpus)
    uuid = dict(zip(zip(column["node"], column["position"], strict=True), column["gpu_uuid"], strict=True))
    link = records(frame, "link")
    links: dict[str, list[tuple[str, str, str, int | None]]] = {}
    for node, position, peer, kind, count in zip(*(link[c].tolist() for c in ("node", "position", "peer_position",
                                                                              "link", "nvlinks")), strict=True):
        pair = uuid.get((node, position)), uuid.get((node, peer))
        if None not in pair:
            links.setdefault(node, []).append((pair[0], pair[1], kind, None if value(count) is None else int(count)))
    rows: dict[str, list[int]] = {}
    for i, name in enumerate(column["node"]):
        if value(name) is not None:
            rows.setdefault(name, []).append(i)
    out = {}
    for name in sorted(rows):
        at = rows[name]
        members = [column["gpu_uuid"][i] for i in at]
        numa = {column["gpu_uuid"][i]: (None if value(column["numa_node"][i]) is None else int(column["numa_node"][i]))
                for i in at}
        layout = topology.Layout.build(members, links.get(name, []), numa)
        known = layout.size <= MAX_GPUS and all(
            layout.ranks[i][j] is not None for i in range(layout.size) for j in range(i + 1, layout.size))
        models = [column["gpu_model"][i] for i in at if value(column["gpu_model"][i]) is not None]
        out[name] = Node(name=name, gpu_model=min(models) if models else None, layout=layout,
                         indices=tuple(column["gpu_index"][i] for i in at),
                         clique=tuple(None if value(clique[i]) is None else str(clique[i]) for i in at), known=known)
    return out


def stats(layout: topology.Layout, free: int) -> dict[str, int | None]:
    """Free-block figures of one node layout and free mask: they depend on its links and NUMA nodes,
    not on which GPUs these are, so the nodes of one shape share them (memoized: fleets repeat both)."""
    return dict(_shape_stats(layout.ranks, layout.nvlinks, layout.numa, free))


@lru_cache(maxsize=65536)
def _shape_stats(ranks: tuple, nvlinks: tuple, numa: tuple, free: int) -> tuple[tuple[str, int | None], ...]:
    layout = topology.Layout(tuple(map(str, range(len(numa)))), ranks, nvlinks, numa)
    numa_known = all(n is not None for n in layout.numa)
    out: dict[str, int | None] = {
        "largest_nvlink_block": layout.largest_block(free).bit_count(),
        "largest_numa_block": (layout.largest_block(free, max_rank=NODE_RANK, same_numa=True).bit_count()
                               if numa_known else None),
        "largest_pcie_switch_block": layout.largest_block(free, max_rank=PIX_RANK).bit_count(),
    }
    for k in topology.BLOCK_SIZES:
        out[f"nvlink_jobs_{k}"] = topology.disjoint_blocks(layout, free, k)
    return tuple(out.items())


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
