"""Building a synthetic fleet: nodes, devices (whole, MIG, time-sliced), pods and their segments,
with the ground truth of every planted behaviour."""

from __future__ import annotations

import math

import numpy as np

from gpuwatch import mig
from gpuwatch.fleet import lifecycle, topology_plant
from gpuwatch.fleet.catalog import (
    COST_CENTERS,
    DEFAULT_START,
    DRIVER,
    GPU_SPECS,
    MIG_LAYOUTS,
    MIG_PROFILES,
    NODE_ROLES,
    PCI_BUSES,
    TEAMS,
    Fleet,
    Segment,
    notebooks_namespace,
    uid,
)
from gpuwatch.fleet.failures import inject
from gpuwatch.model import Device, Pod
from gpuwatch.units import MIB


def build_fleet(*, gpus: int = 64, seed: int = 0, start: float = DEFAULT_START, days: float = 7.0,
                failures: bool = False, topology: bool = False) -> Fleet:
    """A fleet of ``gpus`` GPUs on 8-GPU nodes (H100 and A100; MIG, time-sliced and whole GPUs).

    ``failures``: also plant the five failure modes (gpuwatch.fleet.failures) on time the fleet
    leaves unallocated, with their own random generator: every pod, segment and truth row of the
    fleet without them is kept as it is.
    ``topology``: give every node its interconnect layout and NUMA nodes, and append extra nodes (8x
    L40S PCIe servers, an HGX H100, a GB200 NVL72 rack) with placement, spread and pending workloads
    (gpuwatch.fleet.topology_plant), their own random generator again; truth rows gain ``topology``.
    """
    builder = _Builder(seed=seed, start=start, end=start + days * 86400.0)
    for node_index in range(math.ceil(gpus / 8)):
        builder.add_node(node_index, min(8, gpus - node_index * 8))
    status = tuple(row for pod in builder.pods
                   for row in lifecycle.completed(pod, observed_from=start, job=lifecycle.job_of(pod)))
    fleet = Fleet(seed, builder.start, builder.end, tuple(builder.devices), tuple(builder.pods),
                  tuple(builder.segments), tuple(builder.truth), pod_status=status)
    fleet = inject(fleet) if failures else fleet
    return topology_plant.plant(fleet) if topology else fleet


class _Builder:
    """Lays out nodes, devices and pod timelines. Deterministic in ``seed``."""

    def __init__(self, *, seed: int, start: float, end: float):
        self.seed, self.start, self.end = seed, start, end
        self.rng = np.random.default_rng(seed)
        self.devices: list[Device] = []
        self.pods: list[Pod] = []
        self.segments: list[Segment] = []
        self.truth: list[dict] = []
        self.no_profiling_node: str | None = None

    def add_node(self, index: int, ngpus: int) -> None:
        role = NODE_ROLES[index % len(NODE_ROLES)]
        model = "NVIDIA A100-SXM4-80GB" if index % 5 in (1, 3) else "NVIDIA H100 80GB HBM3"
        node = f"gpu-node-{index:03d}"
        profiling = True
        if role == "mixed" and model.startswith("NVIDIA A100") and self.no_profiling_node is None:
            self.no_profiling_node, profiling = node, False  # one node without DCP: effective util unknown
        gpus = [self._gpu(node, model, i) for i in range(ngpus)]
        if role == "train":
            self._training_node(gpus, profiling)
            return
        for i, gpu in enumerate(gpus):
            if role == "mig" and i < 4:
                self._mig_gpu(gpu, MIG_LAYOUTS[(index + i) % len(MIG_LAYOUTS)], profiling)
            elif role == "shared" and i < 2:
                self._shared_gpu(gpu, replicas=4, profiling=profiling)
            else:
                self._whole_gpu(gpu, profiling)

    def _gpu(self, node: str, model: str, index: int) -> Device:
        device = Device(node=node, gpu_uuid=f"GPU-{uid(self.seed, node, index)}", gpu_index=index,
                        gpu_model=model, fb_total_bytes=GPU_SPECS[model]["fb"],
                        pci_bus_id=f"00000000:{PCI_BUSES[index % 8]:02X}:00.0",
                        driver_version=DRIVER[0], cuda_driver_version=DRIVER[1])
        return device

    def _add_device(self, device: Device) -> int:
        self.devices.append(device)
        return len(self.devices) - 1

    # whole GPUs: a timeline of single-GPU pods with gaps
    def _whole_gpu(self, gpu: Device, profiling: bool) -> None:
        d = self._add_device(gpu)
        choices = (("inference", "productive", 0.3), ("training", "productive", 0.2),
                   ("notebook", "hoarder", 0.3), ("stalled", "false_util", 0.2))
        if not profiling:  # false utilisation is undetectable without SM activity: don't plant it
            choices = choices[:3]
        self._timeline([d], choices, durations={"inference": (2, 7), "training": (0.25, 2),
                                               "notebook": (0.33, 3), "stalled": (0.2, 1.5)},
                       profiling=profiling)

    def _training_node(self, gpus: list[Device], profiling: bool) -> None:
        ids = [self._add_device(g) for g in gpus]
        width = 8 if len(ids) == 8 and self.rng.random() < 0.5 else 4
        for i in range(0, len(ids), width):
            group = ids[i:i + width]
            choices = (("training", "productive", 0.75), ("stalled", "false_util", 0.15), ("notebook", "hoarder", 0.10))
            self._timeline(group, choices, durations={"training": (0.5, 3), "stalled": (0.3, 1.5),
                                                      "notebook": (0.3, 1.5)}, profiling=profiling)

    def _mig_gpu(self, gpu: Device, layout: tuple, profiling: bool) -> None:
        used_ids: dict[int, int] = {}
        for profile_id, start in layout:
            name, _compute, size = MIG_PROFILES[profile_id]
            gi = _next_gi_id(profile_id, used_ids)
            inst = Device(node=gpu.node, gpu_uuid=gpu.gpu_uuid, gpu_index=gpu.gpu_index, gpu_model=gpu.gpu_model,
                          fb_total_bytes=_instance_bytes(gpu, profile_id), pci_bus_id=gpu.pci_bus_id,
                          mig_gi_id=gi, mig_profile=name, mig_profile_id=profile_id,
                          mig_placement_start=start, mig_placement_size=size,
                          mig_uuid=f"MIG-{uid(self.seed, gpu.gpu_uuid, gi)}",
                          driver_version=gpu.driver_version, cuda_driver_version=gpu.cuda_driver_version)
            d = self._add_device(inst)
            if self.rng.random() < 0.2:  # a free instance all week
                self._segment(d, None, self.start, self.end, "idle", "unallocated", profiling=profiling)
                continue
            self._timeline([d], (("inference", "productive", 0.55), ("notebook", "hoarder", 0.35),
                                 ("stalled", "false_util", 0.10 if profiling else 0.0)),
                           durations={"inference": (1, 7), "notebook": (0.4, 3), "stalled": (0.3, 1.5)},
                           profiling=profiling, resource=f"nvidia.com/mig-{name}")

    def _shared_gpu(self, gpu: Device, *, replicas: int, profiling: bool) -> None:
        d = self._add_device(gpu)
        occupied: list[tuple[float, float]] = []
        for slot in range(replicas):
            occupied += self._timeline([d], (("inference", "productive", 0.6), ("notebook", "hoarder", 0.4)),
                                       durations={"inference": (1, 7), "notebook": (0.4, 3)}, profiling=profiling,
                                       resource="nvidia.com/gpu.shared", share=1.0 / replicas, gaps=False,
                                       slot=slot)
        for lo, hi in _complement(occupied, self.start, self.end):
            self._segment(d, None, lo, hi, "idle", "unallocated", profiling=profiling)

    def _timeline(self, devices: list[int], choices: tuple, *, durations: dict, profiling: bool,
                  resource: str = "nvidia.com/gpu", share: float = 1.0, gaps: bool = True,
                  slot: int | None = None) -> list[tuple[float, float]]:
        """Fill [start, end) on ``devices`` with pods; returns the occupied intervals."""
        kinds = [c for c in choices if c[2] > 0]
        weights = np.array([c[2] for c in kinds]) / sum(c[2] for c in kinds)
        t, occupied = self.start, []
        while t < self.end:
            if gaps and self.rng.random() < 0.35:  # unallocated for a while
                gap_end = min(self.end, t + self.rng.uniform(0.5, 8) * 3600)
                for d in devices:
                    self._segment(d, None, t, gap_end, "idle", "unallocated", profiling=profiling)
                t = gap_end
                continue
            kind, behavior, _ = kinds[self.rng.choice(len(kinds), p=weights)]
            lo, hi = durations[kind]
            end = t + self.rng.uniform(lo, hi) * 86400
            if end > self.end - 2 * 3600:  # runs to the window's end: still running
                end = self.end
            if self.end - t < 2 * 3600:  # too short to judge: leave the tail unallocated
                for d in devices:
                    self._segment(d, None, t, self.end, "idle", "unallocated", profiling=profiling)
                break
            self._pod(devices, kind, behavior, t, end, resource=resource, share=share, profiling=profiling, slot=slot)
            occupied.append((t, end))
            t = end
        return occupied

    def _pod(self, devices: list[int], kind: str, behavior: str, start: float, end: float, *,
             resource: str, share: float, profiling: bool, slot: int | None) -> None:
        dev0 = self.devices[devices[0]]
        team = str(self.rng.choice(sorted(TEAMS)))
        namespace, owner_kind, owner, priority = self._owner(kind, team)
        index = len(self.pods)
        pod_name = f"{owner}-{uid(index)[:5]}" if owner_kind in ("Deployment", "Job") else (
            f"{owner}-0" if owner_kind in ("Notebook", "StatefulSet") else owner)
        ids = tuple(self.devices[d].mig_uuid or self.devices[d].gpu_uuid for d in devices)
        labeled = self.rng.random() > 0.1  # some pods carry no team label: chargeback falls back to namespace
        pod = Pod(namespace=namespace, pod=pod_name, pod_uid=uid("pod", self.seed, index), node=dev0.node,
                  owner_kind=owner_kind, owner_name=owner if owner_kind else "", team=team if labeled else "",
                  priority_class=priority, start_ts=start, end_ts=None if end >= self.end else end,
                  gpu_resource=resource, gpu_count=round(share * len(devices), 6), device_ids=ids,
                  labels=((("team", team),) if labeled else ()) + (("cost_center", COST_CENTERS[team]),))
        self.pods.append(pod)
        placement = "mig" if dev0.is_mig else ("shared" if share < 1 else "whole")
        self.truth.append({"namespace": namespace, "pod": pod_name, "behavior": behavior,
                           "placement": placement, "team": team})
        fb_frac = {"training": 0.75, "inference": 0.45, "notebook": 0.35, "stalled": 0.6}[kind]
        fb_frac = min(0.95, fb_frac * (0.7 + 0.6 * self.rng.random()) * (1.0 if share == 1 else share * 2))
        for d in devices:
            self._segment(d, index, start, end, kind, behavior, share=share, fb_frac=fb_frac,
                          profiling=profiling, multi_gpu=len(devices) > 1)

    def _owner(self, kind: str, team: str) -> tuple[str, str, str, str]:
        namespaces = TEAMS[team]
        n = len(self.pods)
        if kind == "notebook":
            user = ("alice", "bob", "chen", "dana", "eve", "farid", "gita", "hugo")[n % 8]
            return notebooks_namespace(team), "Notebook", f"{user}-nb{n}", ""
        if kind == "inference":
            kind_ = "StatefulSet" if n % 7 == 0 else "Deployment"
            return namespaces[-1], kind_, f"{team}-serve-{n}", "production-critical"
        owner_kind = ("Job", "Job", "Job", "RayCluster", "")[n % 5]
        return namespaces[0], owner_kind, f"{team}-train-{n}", "batch-low"

    def _segment(self, device: int, pod: int | None, start: float, end: float, kind: str, behavior: str, *,
                 share: float = 1.0, fb_frac: float = 0.0, profiling: bool = True, multi_gpu: bool = False) -> None:
        self.segments.append(Segment(device=device, pod=pod, start=start, end=end, behavior=behavior, kind=kind,
                                     share=share, fb_frac=fb_frac, profiling=profiling, multi_gpu=multi_gpu))


def _instance_bytes(gpu: Device, profile_id: int) -> int:
    """A MIG instance's memory as real GPUs of this size reported it (mig.CAPTURED), else its memory
    slices' share of the GPU (a simulated model nobody captured)."""
    captured = mig.captured_profiles(gpu.fb_total_bytes)
    if captured is not None and captured.instance_mib(profile_id):
        return captured.instance_mib(profile_id) * MIB
    return gpu.fb_total_bytes * mig.PROFILES[profile_id].size // mig.MEMORY_SLICES


def _next_gi_id(profile_id: int, used: dict[int, int]) -> int:
    """NVML-like GI ids: not tied to position (1g from 7, 2g from 3, 3g from 1, 7g 0)."""
    base = {19: 7, 15: 3, 14: 3, 9: 1, 5: 1, 0: 0}[profile_id]
    gi = base
    while gi in used:
        gi += 1
    used[gi] = profile_id
    return gi


def _complement(intervals: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    """[start, end) minus the union of ``intervals``."""
    out, t = [], start
    for lo, hi in sorted(intervals):
        if lo > t:
            out.append((t, lo))
        t = max(t, hi)
    if t < end:
        out.append((t, end))
    return out
