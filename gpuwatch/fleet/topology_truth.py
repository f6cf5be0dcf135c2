"""Ground truth of the topology findings (truth.csv's ``topology`` column), judged by brute force from
what a fleet publishes, as the analyses see it (docs/architecture.md#topology): its pods file (node,
start, end, devices), pod states (job, pending requests, node selectors), topology rows and NUMA nodes.

* a pod holding >= 2 whole GPUs of one node: ``misplaced`` when a strictly better block of as many
  GPUs (worst link, then NUMA nodes spanned) was free on its node at its start, else ``well_placed``;
* ``spread``: every pod of a multi-pod job (pod_status ``job``) on more nodes than its pods needed,
  given the free GPUs of its model's nodes at the job's first start;
* a pod the scheduler marked unschedulable, over its wait (creation until its next state, else the
  trace's end): ``blocked`` when for at least BLOCKED_MIN_SECONDS its pool (the nodes its node selector
  admits) had its request free in total while no node had it; ``full`` when the pool never had it free
  in total; neither: empty.

A GPU is free at t when it is whole (not MIG-partitioned, not time-sliced) and no pod of the pods file
holds it at t (start <= t < end; no end: to the trace's end). Everything else: empty.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable

from gpuwatch import topology
from gpuwatch.fleet import layouts
from gpuwatch.fleet.catalog import GPU_PRODUCT_LABEL, Fleet, gpu_product
from gpuwatch.model import Pod

WHOLE = "nvidia.com/gpu"
BLOCKED_MIN_SECONDS = 1800.0


def label(fleet: Fleet) -> Fleet:
    """``fleet`` with every truth row's ``topology`` set (empty where there is nothing to judge)."""
    occupancy = Occupancy(fleet)
    labels = {}
    for index, pod in enumerate(fleet.pods):
        verdict = occupancy.placement(index, pod)
        if verdict:
            labels[(pod.namespace, pod.pod)] = verdict
    for index in spread(fleet, occupancy):
        labels[(fleet.pods[index].namespace, fleet.pods[index].pod)] = "spread"
    labels.update(pending(fleet, occupancy))
    truth = tuple({**row, "topology": labels.get((row["namespace"], row["pod"]), "")} for row in fleet.truth)
    return dataclasses.replace(fleet, truth=truth)


class Occupancy:
    """Which whole GPUs of each node the pods file holds, when (GPU positions as in the node's layout)."""

    def __init__(self, fleet: Fleet):
        self.end = fleet.end
        self.layouts = {node: layouts.node_layout(fleet, node) for node in fleet.nodes()}
        self.models = {d.node: d.gpu_model for d in fleet.devices}
        self.where = {g: (node, i) for node, layout in self.layouts.items() for i, g in enumerate(layout.gpus)}
        for d in fleet.devices:
            if d.is_mig:
                self.where[d.mig_uuid] = self.where[d.gpu_uuid]
        unusable = {self.where[d.gpu_uuid] for d in fleet.devices if d.is_mig}
        unusable |= {self.where[g] for p in fleet.pods if p.gpu_resource != WHOLE for g in p.device_ids}
        self.usable = {node: sum(1 << i for i in range(layout.size) if (node, i) not in unusable)
                       for node, layout in self.layouts.items()}
        self.holds: dict[str, list[tuple[float, float, int, int]]] = {}
        for index, pod in enumerate(fleet.pods):
            end = self.end if pod.end_ts is None else pod.end_ts
            self.holds.setdefault(pod.node, []).append((pod.start_ts, end, index, self.mask(pod)))

    def mask(self, pod: Pod) -> int:
        return sum(1 << self.where[g][1] for g in set(pod.device_ids))

    def free(self, node: str, t: float, *, without: Iterable[int] = ()) -> int:
        """Whole GPUs of ``node`` no pod (but those ``without``) holds at ``t``."""
        skip = set(without)
        held = 0
        for start, end, index, mask in self.holds.get(node, ()):
            if start <= t < end and index not in skip:
                held |= mask
        return self.usable[node] & ~held

    def placement(self, index: int, pod: Pod) -> str | None:
        """well_placed | misplaced for a pod on >= 2 whole GPUs of a node of known topology, else None."""
        if pod.gpu_resource != WHOLE or len(set(pod.device_ids)) < 2:
            return None
        layout, mask = self.layouts[pod.node], self.mask(pod)
        actual = quality(layout, mask)
        best = layout.best_block(self.free(pod.node, pod.start_ts, without=[index]) | mask, mask.bit_count())
        if actual is None or best is None or quality(layout, best) is None:
            return None
        return "misplaced" if quality(layout, best) < actual else "well_placed"

    def changes(self, nodes: list[str], lo: float, hi: float) -> list[float]:
        """``lo`` and every instant in (lo, hi) a pod starts or ends on ``nodes``."""
        inside = {t for node in nodes for start, end, _, _ in self.holds.get(node, ()) for t in (start, end)
                  if lo < t < hi}
        return [lo, *sorted(inside)]


def quality(layout: topology.Layout, mask: int) -> tuple[int, int] | None:
    """A block's quality, lower better: its worst link's rank, then the NUMA nodes it spans (None: unknown)."""
    worst, span = layout.worst_rank(mask), layout.numa_span(mask)
    return None if worst is None or span is None else (worst, span)


def spread(fleet: Fleet, occupancy: Occupancy) -> set[int]:
    """Pods (indices) of multi-pod jobs on more nodes than they needed at the job's first start."""
    jobs: dict[tuple[str, str], str] = {}
    for row in fleet.pod_status:
        if row["job"]:
            jobs.setdefault((row["namespace"], row["pod"]), row["job"])
    members: dict[tuple[str, str], list[int]] = {}
    for index, pod in enumerate(fleet.pods):
        job = jobs.get((pod.namespace, pod.pod))
        if job is not None and pod.gpu_resource == WHOLE:
            members.setdefault((pod.namespace, job), []).append(index)
    out: set[int] = set()
    for indices in members.values():
        pods = [fleet.pods[i] for i in indices]
        nodes = {p.node for p in pods}
        if len(nodes) < 2:
            continue
        start = min(p.start_ts for p in pods)
        pool = [n for n, m in occupancy.models.items() if m == occupancy.models[pods[0].node]]
        free = [occupancy.free(n, start, without=indices).bit_count() for n in pool]
        if len(nodes) > fewest_nodes([len(set(p.device_ids)) for p in pods], free):
            out.update(indices)
    return out


def fewest_nodes(sizes: list[int], free: list[int]) -> int:
    """The fewest nodes (of free GPU counts ``free``) that could hold pods of ``sizes`` GPUs; len(sizes)
    if none could."""
    ranked = sorted(free, reverse=True)
    for k in range(1, len(sizes) + 1):
        if _fits(sorted(sizes, reverse=True), ranked[:k]):
            return k
    return len(sizes)


def _fits(sizes: list[int], room: list[int]) -> bool:
    if not sizes:
        return True
    for i, r in enumerate(room):
        if r >= sizes[0] and _fits(sizes[1:], [*room[:i], r - sizes[0], *room[i + 1:]]):
            return True
    return False


def pending(fleet: Fleet, occupancy: Occupancy) -> dict[tuple[str, str], str]:
    """blocked | full for each pod the scheduler marked unschedulable (empty when neither)."""
    rows: dict[tuple[str, str], list[dict]] = {}
    for row in fleet.pod_status:
        rows.setdefault((row["namespace"], row["pod"]), []).append(row)
    out = {}
    for key, states in rows.items():
        states = sorted(states, key=lambda r: r["ts"])
        if not any(r["unschedulable"] == 1 for r in states):
            continue
        created = states[0]["created_ts"]
        until = next((r["ts"] for r in states if r["phase"] != "Pending"), fleet.end)
        out[key] = wait_verdict(occupancy, pool(occupancy, states[0]["node_selector"]), created, until,
                                states[0]["gpu_request"])
    return out


def pool(occupancy: Occupancy, node_selector: str | None) -> list[str]:
    """The nodes a pod's node selector admits (by GPU product label; none: every node)."""
    product = json.loads(node_selector).get(GPU_PRODUCT_LABEL) if node_selector else None
    return [n for n, m in sorted(occupancy.models.items()) if product is None or gpu_product(m) == product]


def wait_verdict(occupancy: Occupancy, nodes: list[str], created: float, until: float, request: float) -> str:
    """blocked | full | "" for a wait of [created, until) for ``request`` GPUs on ``nodes``."""
    instants = occupancy.changes(nodes, created, until)
    blocked, most = 0.0, 0
    for lo, hi in zip(instants, [*instants[1:], until], strict=True):
        counts = [occupancy.free(n, lo).bit_count() for n in nodes]
        most = max(most, sum(counts))
        if sum(counts) >= request and max(counts, default=0) < request:
            blocked += hi - lo
    if blocked >= BLOCKED_MIN_SECONDS:
        return "blocked"
    return "full" if most < request else ""
