"""Topology workloads planted in a synthetic fleet (``build_fleet(topology=True)``), with ground truth
in truth.csv's ``topology`` column (docs/architecture.md#topology).

Extra nodes are appended after the fleet's own, with their own random generator, so every device,
pod, segment and state of the fleet without them is kept: two 8x L40S PCIe servers, one HGX H100,
and a two-tray GB200 NVL72 rack (4 GPUs per tray, one NVLink clique). On them, scenes one after
another (gpuwatch.fleet.topology_scenes): multi-GPU pods on a worse block than one free on their
node and decoys on the best block left, multi-pod jobs spread over two nodes while one could hold
them and decoys spread because none could, and pods left Pending while their pool had enough free
GPUs but no node did (and decoys with too few free GPUs), which then run or stay Pending. Every node
then gets its layout (gpuwatch.fleet.layouts), and gpuwatch.fleet.topology_truth labels every pod
from the fleet's own pods file and states, never from what a scene meant.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import numpy as np

from gpuwatch import topology
from gpuwatch.fleet import layouts, lifecycle, topology_scenes, topology_truth
from gpuwatch.fleet.catalog import (
    COST_CENTERS,
    DRIVER,
    EMPTY_FB_MIB,
    GPU_PRODUCT_LABEL,
    GPU_SPECS,
    PCI_BUSES,
    TEAMS,
    Fleet,
    Segment,
    gpu_product,
    uid,
)
from gpuwatch.model import Device, Pod
from gpuwatch.units import MIB

MINUTE, HOUR = 60.0, 3600.0
STREAM = 14  # the generator's stream: np.random.default_rng([seed, STREAM]) (failures use 15)
# The extra nodes: (GPU model, GPUs) in the order appended.
EXTRA_NODES = (("NVIDIA L40S", 8), ("NVIDIA L40S", 8), ("NVIDIA H100 80GB HBM3", 8), ("NVIDIA GB200", 4),
               ("NVIDIA GB200", 4))


def plant(fleet: Fleet) -> Fleet:
    """``fleet`` with its layouts, the extra nodes and their workloads, and truth's topology column."""
    plot = Plot(fleet)
    nodes = [plot.node(model, n) for model, n in EXTRA_NODES]
    rack = f"{uid(fleet.seed, 'nvl72-rack')}/{int(plot.rng.integers(1, 32767))}"
    for node in nodes[3:]:
        plot.cliques[node.name] = rack
    topology_scenes.play(plot, l40s=nodes[:2], hgx=nodes[2], gb200=nodes[3:],
                         window=(fleet.start + HOUR, fleet.end - 2 * HOUR))
    return topology_truth.label(layouts.with_layouts(plot.fleet(), cliques=plot.cliques))


@dataclass(frozen=True)
class Node:
    """One extra node: its devices (indices into the planted fleet's devices, by GPU index) and layout."""

    name: str
    model: str
    devices: tuple[int, ...]
    layout: topology.Layout

    @property
    def size(self) -> int:
        return len(self.devices)

    @property
    def all(self) -> int:
        return (1 << self.size) - 1


class Plot:
    """What the scenes add: nodes, pods (with truth rows), segments and pod states; random choices from
    ``np.random.default_rng([seed, STREAM])``."""

    def __init__(self, fleet: Fleet):
        self.base, self.rng = fleet, np.random.default_rng([fleet.seed, STREAM])
        self.devices: list[Device] = []
        self.pods: list[Pod] = []
        self.truth: list[dict] = []
        self.waiting: list[dict] = []  # truth rows of pods that stay Pending (not in the pods file)
        self.segments: list[Segment] = []
        self.status: list[dict] = []
        self.cliques: dict[str, str] = {}
        self.waiters = 0  # pods planted to wait so far (their names count them)

    # -- random draws
    def uniform(self, lo: float, hi: float) -> float:
        """A whole number of seconds in [lo, hi]."""
        return float(round(self.rng.uniform(lo, hi)))

    def pick(self, options: list):
        return options[int(self.rng.integers(len(options)))]

    def subset(self, mask: int, n: int) -> int:
        """``n`` of the positions set in ``mask``, at random, as a mask."""
        members = [i for i in range(mask.bit_length()) if mask >> i & 1]
        chosen = self.rng.choice(len(members), size=n, replace=False) if n else []
        return sum(1 << members[int(c)] for c in chosen)

    def team(self) -> str:
        return str(self.rng.choice(sorted(TEAMS)))

    # -- building
    def node(self, model: str, ngpus: int) -> Node:
        name = f"gpu-node-{len(self.base.nodes()) + len({d.node for d in self.devices}):03d}"
        first = len(self.base.devices) + len(self.devices)
        for i in range(ngpus):
            self.devices.append(Device(node=name, gpu_uuid=f"GPU-{uid(self.base.seed, name, i)}", gpu_index=i,
                                       gpu_model=model, fb_total_bytes=GPU_SPECS[model]["fb"],
                                       pci_bus_id=f"00000000:{PCI_BUSES[i % 8]:02X}:00.0",
                                       driver_version=DRIVER[0], cuda_driver_version=DRIVER[1]))
        uuids = [d.gpu_uuid for d in self.devices[first - len(self.base.devices):]]
        return Node(name, model, tuple(range(first, first + ngpus)), layouts.build(layouts.LAYOUTS[model], uuids))

    def next_index(self) -> int:
        return len(self.base.pods) + len(self.pods)

    def pod(self, node: Node, mask: int, start: float, end: float, *, stem: str, team: str | None = None, owner: str | None = None, name: str | None = None,
            pending: bool = False) -> Pod:
        """A Job's pod training on ``mask``'s GPUs of ``node`` over [start, end) (end past the trace: still
        running), with its segments, truth row and (unless ``pending``: the caller writes them) states."""
        index, team = self.next_index(), team or self.team()
        owner = owner or f"{team}-{stem}-{index}"
        positions = [i for i in range(node.size) if mask >> i & 1]
        end = min(end, self.base.end)
        pod = Pod(namespace=TEAMS[team][0], pod=name or f"{owner}-{uid(index)[:5]}", pod_uid=uid("pod", self.base.seed, index),
                  node=node.name, owner_kind="Job", owner_name=owner, team=team, priority_class="batch-low",
                  start_ts=start, end_ts=None if end >= self.base.end else end, gpu_resource="nvidia.com/gpu",
                  gpu_count=float(len(positions)),
                  device_ids=tuple(self._device(node, p).gpu_uuid for p in positions),
                  labels=(("team", team), ("cost_center", COST_CENTERS[team])))
        self.pods.append(pod)
        self.truth.append(_truth(pod, team, pending=pending))
        fb_frac = float(self.rng.uniform(0.45, 0.8))
        for p in positions:
            self.segments.append(Segment(device=node.devices[p], pod=index, start=start, end=end,
                                         behavior="productive", kind="training", fb_frac=fb_frac,
                                         multi_gpu=len(positions) > 1))
        if not pending:
            self.status += lifecycle.completed(pod, observed_from=self.base.start, job=owner)
        return pod

    def wait(self, node: Node, gpus: int, created: float, *, team: str, owner: str, name: str,
             scheduled: Pod | None) -> None:
        """The states of a pod asking for ``gpus`` GPUs of ``node``'s model, unschedulable from
        ``created`` until ``scheduled`` (its pod) starts, or to the trace's end."""
        selector = json.dumps({GPU_PRODUCT_LABEL: gpu_product(node.model)}, sort_keys=True)
        self.status += lifecycle.unschedulable(TEAMS[team][0], name, created=created, job=owner,
                                               gpu_request=float(gpus), node_selector=selector, scheduled=scheduled)
        if scheduled is None:
            self.waiting.append({"namespace": TEAMS[team][0], "pod": name, "behavior": "pending",
                                 "placement": "none", "team": team})

    def _device(self, node: Node, position: int) -> Device:
        return self.devices[node.devices[position] - len(self.base.devices)]

    def fleet(self) -> Fleet:
        """The base fleet with the extra nodes, their pods and their unallocated time."""
        base = self.base
        return dataclasses.replace(
            base, devices=base.devices + tuple(self.devices), pods=base.pods + tuple(self.pods),
            segments=base.segments + tuple(self.segments) + tuple(self._unallocated()),
            truth=base.truth + tuple(self.truth) + tuple(self.waiting), pod_status=base.pod_status + tuple(self.status))

    def _unallocated(self) -> list[Segment]:
        """Each extra device's time no pod holds, holding an empty GPU's memory (catalog.EMPTY_FB_MIB)."""
        held: dict[int, list[tuple[float, float]]] = {}
        for s in self.segments:
            held.setdefault(s.device, []).append((s.start, s.end))
        first, out = len(self.base.devices), []
        for device in range(first, first + len(self.devices)):
            t = self.base.start
            for lo, hi in [*sorted(held.get(device, ())), (self.base.end, self.base.end)]:
                if lo > t:
                    out.append(Segment(device=device, pod=None, start=t, end=lo, behavior="unallocated", kind="idle",
                                       fb_bytes=EMPTY_FB_MIB[None] * MIB))
                t = max(t, hi)
        return out


def _truth(pod: Pod, team: str, *, pending: bool) -> dict:
    return {"namespace": pod.namespace, "pod": pod.pod, "behavior": "pending" if pending else "productive",
            "placement": "none" if pending else "whole", "team": team}
