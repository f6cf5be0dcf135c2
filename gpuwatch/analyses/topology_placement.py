"""Topology placement finisher: judges each multi-GPU pod and multi-pod job against the blocks that
were free on its nodes when it started (gpuwatch.topology's exact searches over the SQL's records).

- A pod (>= 2 whole GPUs on one node): the free set at its start is the node's GPUs minus those of
  every other pod live then (start_ts <= t < end_ts); the better block is ``Layout.best_block`` of
  free + its own GPUs, when strictly better (``topology.better``) -> ``misplaced``.
- A job (>= 2 pods of one job with overlapping lifetimes, one row per such group): ``min_nodes`` is
  the fewest nodes of its pool (its GPU model) that could hold its pods at its start, given each
  node's free GPUs (its own pods' GPUs count as free) as floor(free / GPUs per pod), largest first;
  more nodes spanned -> ``spread``. A job on one node is judged like a pod on all its GPUs.
- The link between two nodes is taken to be the network, assumed SYS-class bandwidth
  (``topology.bandwidth("SYS")``), unless every GPU of the job carries one ``nvlink_clique`` (multi-node
  NVLink): then crossing nodes costs nothing in this model.
- Penalty (an estimate): ``topology.penalty_share`` of the worst-link bandwidths with
  ``placement_comm_share``; ``placement_numa_penalty`` for a NUMA-only split. A spread job that needs
  several nodes anyway keeps the network as its worst link: 0. Unknown links: ``topology unknown``,
  never charged (penalty NULL).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import pandas as pd

from gpuwatch import topology
from gpuwatch.analyses import node_layouts
from gpuwatch.analyses.node_layouts import Node, value

COLUMNS = ("scope", "namespace", "pod", "job", "team", "nodes", "gpu_model", "gpus", "start_ts", "end_ts",
           "worst_link", "numa_nodes", "nodes_spanned", "min_nodes", "better_link", "better_gpus",
           "nvlink_bytes_per_second", "verdict", "reason", "penalty_share", "gpu_hours", "cost_usd", "penalty_usd",
           "link_matrix")
NETWORK = "SYS"  # the assumed class of a link between two nodes outside one NVLink clique
UNKNOWN = "topology unknown"


@dataclass(frozen=True)
class Alloc:
    namespace: str
    pod: str
    node: str
    team: Any
    job: Any
    start: pd.Timestamp
    end: pd.Timestamp | None
    gpus: float
    mask: int
    whole: bool
    gpu_hours: Any
    cost: Any
    nvlink_sum: float
    nvlink_samples: int

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.pod

    def live(self, t: pd.Timestamp) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


class Fleet:
    """Node layouts and the allocation history: what was free where, at any instant."""

    def __init__(self, nodes: dict[str, Node], allocs: list[Alloc]):
        self.nodes = nodes
        self.by_node: dict[str, list[Alloc]] = defaultdict(list)
        for a in allocs:
            self.by_node[a.node].append(a)

    def free(self, node: str, t: pd.Timestamp, exclude: set) -> int:
        """The node's GPUs held by none of the pods live at ``t`` except those in ``exclude``."""
        held = 0
        for a in self.by_node.get(node, ()):
            if a.key not in exclude and a.live(t):
                held |= a.mask
        return self.nodes[node].full & ~held

    def pool(self, model: Any) -> list[str]:
        return [name for name, n in self.nodes.items() if n.gpu_model == model]


def finish(con: Any, frame: pd.DataFrame, params: dict) -> pd.DataFrame:
    """One row per judged pod and job (columns ``COLUMNS``)."""
    allocs = [_alloc(r) for r in node_layouts.records(frame, "pod").to_dict("records")]
    fleet = Fleet(node_layouts.nodes(frame), allocs)
    start = _naive(params["start"])
    judged = [a for a in allocs if a.whole and (a.end is None or a.end > start)]
    rows = [pod_row(fleet, a, params) for a in judged if a.mask.bit_count() >= 2]
    rows += [job_row(fleet, group, params) for group in jobs(judged)]
    out = pd.DataFrame(rows, columns=list(COLUMNS))
    for name in ("numa_nodes", "nodes_spanned", "min_nodes"):
        out[name] = out[name].astype("Int64")
    for name in ("gpus", "nvlink_bytes_per_second", "penalty_share", "gpu_hours", "cost_usd", "penalty_usd"):
        out[name] = out[name].astype("float64")
    for name in ("start_ts", "end_ts"):
        out[name] = pd.to_datetime(out[name])
    return out.sort_values(["scope", "namespace", "job", "pod", "start_ts"], kind="stable",
                           na_position="first").reset_index(drop=True)


def _naive(t: Any) -> pd.Timestamp:
    """A window bound as the store's naive UTC timestamps."""
    stamp = pd.Timestamp(t)
    return stamp.tz_convert("UTC").tz_localize(None) if stamp.tzinfo else stamp


def _alloc(r: dict) -> Alloc:
    end = value(r["end_ts"])
    return Alloc(namespace=r["namespace"], pod=r["pod"], node=r["node"], team=value(r["team"]), job=value(r["job"]),
                 start=pd.Timestamp(r["start_ts"]), end=None if end is None else pd.Timestamp(end),
                 gpus=float(r["gpu_count"]), mask=int(value(r["mask"]) or 0), whole=bool(r["whole"]),
                 gpu_hours=value(r["gpu_hours"]), cost=value(r["cost_usd"]),
                 nvlink_sum=float(value(r["nvlink_sum"]) or 0.0), nvlink_samples=int(value(r["nvlink_samples"]) or 0))


def jobs(allocs: list[Alloc]) -> list[list[Alloc]]:
    """Groups of >= 2 pods of one (namespace, job) whose lifetimes overlap (chained)."""
    by_job: dict[tuple, list[Alloc]] = defaultdict(list)
    for a in allocs:
        if a.job is not None:
            by_job[(a.namespace, a.job)].append(a)
    out = []
    for key in sorted(by_job):
        group: list[Alloc] = []
        reach = pd.Timestamp.min  # the latest end in the group so far (an open pod: never ends)
        for a in sorted(by_job[key], key=lambda x: (x.start, x.pod)):
            if group and a.start >= reach:
                out.append(group)
                group = []
            group.append(a)
            reach = max(reach if len(group) > 1 else pd.Timestamp.min, pd.Timestamp.max if a.end is None else a.end)
        out.append(group)
    return [g for g in out if len(g) >= 2]


def _base(scope: str, first: Alloc, members: list[Alloc]) -> dict:
    ends = [a.end for a in members]
    hours = [a.gpu_hours for a in members]
    costs = [a.cost for a in members]
    samples = sum(a.nvlink_samples for a in members)
    return {"scope": scope, "namespace": first.namespace, "pod": first.pod if scope == "pod" else None,
            "job": first.job, "team": first.team, "nodes": ",".join(sorted({a.node for a in members})),
            "gpus": sum(a.gpus for a in members), "start_ts": min(a.start for a in members),
            "end_ts": None if None in ends else max(ends),
            "nvlink_bytes_per_second": sum(a.nvlink_sum for a in members) / samples if samples else None,
            "gpu_hours": None if None in hours else sum(hours), "cost_usd": None if None in costs else sum(costs)}


def pod_row(fleet: Fleet, a: Alloc, params: dict) -> dict:
    row = _base("pod", a, [a])
    return {**row, **_on_node(fleet, a.node, a.mask, a.start, {a.key}, row["cost_usd"], params),
            "nodes_spanned": 1, "min_nodes": 1}


def _on_node(fleet: Fleet, name: str, own: int, t: pd.Timestamp, exclude: set, cost: Any, params: dict) -> dict:
    """The block ``own`` on node ``name`` judged against what was free there at ``t``."""
    node = fleet.nodes[name]
    layout, k = node.layout, own.bit_count()
    out = {"gpu_model": node.gpu_model, "worst_link": topology.worst_link(layout, own),
           "numa_nodes": layout.numa_span(own), "link_matrix": node.link_matrix(own),
           "better_link": None, "better_gpus": None}
    if not node.known:
        return {**out, "verdict": UNKNOWN, "penalty_share": None, "penalty_usd": None,
                "reason": f"the links between {name}'s GPUs are not all known: not judged"}
    best = layout.best_block(fleet.free(name, t, exclude) | own, k)
    if not topology.better(layout, best, own):
        return {**out, "verdict": "well_placed", "penalty_share": 0.0, "penalty_usd": 0.0,
                "reason": f"no better-connected block of {k} GPUs was free on {name} when it started "
                          f"(its worst link {out['worst_link']}, {out['numa_nodes'] or 'unknown'} NUMA node(s))"}
    share = _penalty(layout, own, best, params)
    better_link = topology.worst_link(layout, best)
    return {**out, "verdict": "misplaced", "better_link": better_link, "better_gpus": node.label_gpus(best),
            "penalty_share": share, "penalty_usd": None if share is None or cost is None else share * cost,
            "reason": f"its worst link is {out['worst_link']} across {out['numa_nodes'] or 'unknown'} NUMA node(s); "
                      f"GPUs {node.label_gpus(best)} on {name} ({better_link}, {layout.numa_span(best) or 'unknown'} "
                      "NUMA node(s)) were free when it started (penalty is an estimate)"}


def _penalty(layout: topology.Layout, own: int, best: int, params: dict) -> float | None:
    """Estimated share of GPU time lost on ``own`` against ``best`` (None: a bandwidth unknown)."""
    numa_only = layout.worst_rank(best) == layout.worst_rank(own)
    if numa_only:
        return float(params["placement_numa_penalty"])
    actual, alternative = layout.worst_bandwidth(own), layout.worst_bandwidth(best)
    if actual is None or alternative is None:
        return None
    share = topology.penalty_share(actual, alternative, float(params["placement_comm_share"]))
    spans = layout.numa_span(best), layout.numa_span(own)
    if share == 0.0 and None not in spans and spans[0] < spans[1]:
        return float(params["placement_numa_penalty"])
    return share


def job_row(fleet: Fleet, members: list[Alloc], params: dict) -> dict:
    first = members[0]
    row = _base("job", first, members)
    t, exclude = row["start_ts"], {a.key for a in members}
    names = sorted({a.node for a in members})
    model = fleet.nodes[first.node].gpu_model
    per_pod = max(a.mask.bit_count() for a in members)
    free = {n: fleet.free(n, t, exclude) for n in fleet.pool(model)}
    min_nodes = _min_nodes(sorted((m.bit_count() // per_pod for m in free.values()), reverse=True), len(members))
    if min_nodes is None:
        min_nodes = len(names)
    row.update(nodes_spanned=len(names), min_nodes=min_nodes)
    if len(names) == 1:
        own = 0
        for a in members:
            own |= a.mask
        return {**row, **_on_node(fleet, names[0], own, t, exclude, row["cost_usd"], params)}
    clique = _one_clique(fleet, members)
    worst = "NV" if clique else NETWORK
    out = {**row, "gpu_model": model, "worst_link": worst, "numa_nodes": _numa_nodes(fleet, members),
           "link_matrix": _job_matrix(fleet, members), "better_link": None, "better_gpus": None}
    if len(names) <= min_nodes:
        return {**out, "verdict": "well_placed", "penalty_share": 0.0, "penalty_usd": 0.0,
                "reason": f"{len(members)} pods of {per_pod} GPUs needed {min_nodes} nodes when it started"}
    reason = (f"{len(members)} pods of {per_pod} GPUs span {len(names)} nodes; {min_nodes} could have held them "
              "when it started")
    if clique or min_nodes > 1:
        why = "its nodes share one NVLink domain" if clique else "the network stays its worst link"
        return {**out, "verdict": "spread", "penalty_share": 0.0, "penalty_usd": 0.0,
                "reason": f"{reason}; {why}: no penalty estimated"}
    alternative = _one_node_alternative(fleet, free, per_pod * len(members), row, params)
    where = alternative.pop("node", None)
    on = f", e.g. GPUs {alternative['better_gpus']} of {where}" if where else ""
    return {**out, "verdict": "spread", **alternative,
            "reason": f"{reason}{on} (the link between nodes is assumed {NETWORK}-class; penalty is an estimate)"}


def _min_nodes(capacities: list[int], pods: int) -> int | None:
    """Fewest nodes holding ``pods`` pods, taking the largest capacities first (None: they do not fit)."""
    held = 0
    for used, capacity in enumerate(capacities, start=1):
        held += capacity
        if held >= pods:
            return used
    return None


def _one_node_alternative(fleet: Fleet, free: dict[str, int], k: int, row: dict, params: dict) -> dict:
    """The best k-block on one node of the pool against the network link (None: links unknown)."""
    best: tuple | None = None
    for name in sorted(free):
        node = fleet.nodes[name]
        if not node.known or free[name].bit_count() < k:
            continue
        block = node.layout.best_block(free[name], k)
        if block is None:
            continue
        key = (node.layout.worst_rank(block), node.layout.numa_span(block) or k + 1, name)
        if best is None or key < best[0]:
            best = (key, node, block)
    if best is None:
        return {"penalty_share": None, "penalty_usd": None}
    _, node, block = best
    alternative = node.layout.worst_bandwidth(block)
    share = (None if alternative is None
             else topology.penalty_share(topology.bandwidth(NETWORK), alternative, float(params["placement_comm_share"])))
    cost = row["cost_usd"]
    return {"node": node.name, "better_link": topology.worst_link(node.layout, block), "better_gpus": node.label_gpus(block),
            "penalty_share": share, "penalty_usd": None if share is None or cost is None else share * cost}


def _one_clique(fleet: Fleet, members: list[Alloc]) -> bool:
    cliques = {fleet.nodes[a.node].clique[i] for a in members for i in fleet.nodes[a.node].layout.members(a.mask)}
    return len(cliques) == 1 and None not in cliques


def _numa_nodes(fleet: Fleet, members: list[Alloc]) -> int | None:
    seen = set()
    for a in members:
        node = fleet.nodes[a.node]
        for i in node.layout.members(a.mask):
            if node.layout.numa[i] is None:
                return None
            seen.add((a.node, node.layout.numa[i]))
    return len(seen)


def _job_matrix(fleet: Fleet, members: list[Alloc]) -> str:
    """{"<node>:0-1": "NV18", ...}: each node's part by GPU index (links between nodes: the network)."""
    parts: dict[str, int] = defaultdict(int)
    for a in members:
        parts[a.node] |= a.mask
    out = {}
    for name in sorted(parts):
        for pair, link in json.loads(fleet.nodes[name].link_matrix(parts[name])).items():
            out[f"{name}:{pair}"] = link
    return json.dumps(out)
