"""Deterministic synthetic GPU fleet: devices, pods with known behaviour, and their signals.

One generator feeds ``gpuwatch simulate`` (bundles), the exporter's ``simulate`` source, the demo,
tests and benchmarks, so all of them exercise the same workloads. Signals are a pure function of
(seed, segment, timestamp): a counter-based hash gives the noise, so a live exporter reading "now"
and a bundle written for a week agree sample for sample.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from gpuwatch import mig
from gpuwatch.model import Device, Pod

MIB = 1 << 20
GPU_SPECS: dict[str, dict] = {
    "NVIDIA H100 80GB HBM3": {"fb": 81559 * MIB, "sms": 132, "idle_w": 70.0, "tdp_w": 700.0, "mig": "10gb"},
    "NVIDIA A100-SXM4-80GB": {"fb": 81920 * MIB, "sms": 108, "idle_w": 55.0, "tdp_w": 400.0, "mig": "10gb"},
}
PRICES_USD_PER_GPU_HOUR = {"NVIDIA H100 80GB HBM3": 4.10, "NVIDIA A100-SXM4-80GB": 2.20}
# MIG profile id -> (name on the simulated 80 GB GPUs, compute slices, memory slices); the slice
# counts come from the one placement table (gpuwatch.mig, DESIGN §6), only the names live here.
_MIG_NAMES_80GB = {19: "1g.10gb", 15: "1g.20gb", 14: "2g.20gb", 9: "3g.40gb", 5: "4g.40gb", 0: "7g.80gb"}
MIG_PROFILES = {pid: (name, mig.PROFILES[pid].compute_slices, mig.PROFILES[pid].size)
                for pid, name in _MIG_NAMES_80GB.items()}
# Layouts as (profile id, placement start); some deliberately strand memory slices.
MIG_LAYOUTS = (
    ((19, 0), (19, 1), (14, 2), (9, 4)),          # all-balanced: uses every slice
    ((19, 0), (19, 1), (19, 5)),                  # 1g left at 5 blocks any 3g at 4
    ((9, 0), (9, 4)),
    tuple((19, s) for s in range(7)),             # seven 1g: slice 7 stranded
    ((5, 0), (9, 4)),
    ((9, 0), (19, 4)),                            # 3g + one 1g: 5..7 only fit 1g/2g
)
NODE_ROLES = ("mixed", "train", "mig", "mixed", "shared", "train", "mixed", "mixed", "train", "mixed")
TEAMS = {"nlp": ("nlp-train", "nlp-serving"), "vision": ("vision",), "recsys": ("recsys-prod", "recsys-exp"),
         "research": ("research-notebooks",), "platform": ("ml-platform",)}
PCI_BUSES = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
SIGNALS = ("gpu_util", "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
           "fb_used_bytes", "power_watts", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")
DEFAULT_START = 1_794_182_400.0  # 2026-11-09T00:00:00Z, a Monday (ISO week 2026-W46)


@dataclass(frozen=True)
class Segment:
    """One device's occupant over ``[start, end)``: a pod (index into ``Fleet.pods``) or nobody."""

    device: int
    pod: int | None
    start: float
    end: float
    behavior: str  # productive | hoarder | false_util | unallocated
    kind: str  # training | inference | notebook | stalled | idle
    share: float = 1.0  # time-sliced replica share of the GPU
    fb_frac: float = 0.0  # memory the occupant holds, as a fraction of the device's framebuffer
    profiling: bool = True  # DCGM/GPM profiling fields available on this node
    multi_gpu: bool = False


@dataclass(frozen=True)
class Fleet:
    seed: int
    start: float
    end: float
    devices: tuple[Device, ...]
    pods: tuple[Pod, ...]
    segments: tuple[Segment, ...]
    truth: tuple[dict, ...]

    def nodes(self) -> list[str]:
        return sorted({d.node for d in self.devices})


def build_fleet(*, gpus: int = 64, seed: int = 0, start: float = DEFAULT_START, days: float = 7.0) -> Fleet:
    """A fleet of ``gpus`` GPUs on 8-GPU nodes (H100 and A100; MIG, time-sliced and whole GPUs)."""
    builder = _Builder(seed=seed, start=start, end=start + days * 86400.0)
    for node_index in range(math.ceil(gpus / 8)):
        builder.add_node(node_index, min(8, gpus - node_index * 8))
    return Fleet(seed, builder.start, builder.end, tuple(builder.devices), tuple(builder.pods),
                 tuple(builder.segments), tuple(builder.truth))


def signals(fleet: Fleet, segment: Segment, ts: np.ndarray) -> dict[str, np.ndarray]:
    """Base-unit signal columns for ``segment`` at timestamps ``ts`` (all inside the segment)."""
    device = fleet.devices[segment.device]
    spec = GPU_SPECS[device.gpu_model]
    stream = _stream(fleet.seed, segment.device, segment.pod)
    u = [_uniform(stream + i, ts) for i in range(6)]
    ones = np.ones(len(ts))
    cols = _BEHAVIOURS[segment.kind](segment, ts, u)
    hold = segment.fb_frac if segment.pod is not None else 0.006
    cols["fb_used_bytes"] = np.round(device.fb_total_bytes * hold * (0.985 + 0.015 * u[5]) / MIB) * MIB
    activity = np.nan_to_num(cols["sm_active"], nan=cols["gpu_util"].mean() if len(ts) else 0.0)
    cols["power_watts"] = spec["idle_w"] + (spec["tdp_w"] - spec["idle_w"]) * np.minimum(activity, 1.0) * 0.85
    link = 2.0e10 * (0.5 + 0.5 * u[4]) * (cols["sm_active"] > 0.2) if segment.multi_gpu else 0.0 * ones
    cols["nvlink_tx_bytes_per_second"] = link
    cols["nvlink_rx_bytes_per_second"] = link
    return _finish(cols, device=device, segment=segment)


def iter_samples(fleet: Fleet, ts: np.ndarray) -> Iterator[tuple[Segment, np.ndarray, dict[str, np.ndarray]]]:
    """For each segment, the grid timestamps that fall in it and their signals."""
    for segment in fleet.segments:
        lo, hi = np.searchsorted(ts, [segment.start, segment.end], side="left")
        if hi > lo:
            part = ts[lo:hi]
            yield segment, part, signals(fleet, segment, part)


def readings_at(fleet: Fleet, t: float, *, node: str | None = None) -> list[tuple[Device, Pod | None, dict[str, float]]]:
    """Every occupant's signals at instant ``t`` (optionally one node's), for the live exporter."""
    out = []
    ts = np.array([float(t)])
    for segment in fleet.segments:
        device = fleet.devices[segment.device]
        if segment.start <= t < segment.end and (node is None or device.node == node):
            values = {k: float(v[0]) for k, v in signals(fleet, segment, ts).items()}
            out.append((device, None if segment.pod is None else fleet.pods[segment.pod], values))
    return out


# --- signal shapes per kind (ratios 0-1; NaN where the field does not exist) -------------------

def _training(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    util = 0.9 + 0.1 * u[0]
    sm = 0.5 + 0.35 * u[1]
    return {"gpu_util": util, "gr_engine_active": util * (0.97 + 0.03 * u[2]), "sm_active": sm,
            "sm_occupancy": sm * (0.35 + 0.3 * u[3]), "tensor_active": 0.2 + 0.5 * u[2],
            "dram_active": 0.25 + 0.4 * u[3]}


def _inference(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    phase = (seg.pod or 0) * 3217.0
    load = np.clip(0.4 + 0.25 * np.sin(2 * np.pi * (ts - phase) / 86400.0) + 0.1 * (u[0] - 0.5), 0.15, 0.95)
    sm = 0.6 * load + 0.05 + 0.05 * u[1]
    return {"gpu_util": load, "gr_engine_active": load * 0.98, "sm_active": sm, "sm_occupancy": sm * 0.4,
            "tensor_active": 0.5 * sm * u[2], "dram_active": 0.3 * load + 0.05 * u[3]}


def _notebook(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    warm = ts < seg.start + 0.03 * (seg.end - seg.start)
    blip = u[0] < 0.01
    util = np.where(warm, 0.3 + 0.3 * u[1], np.where(blip, 0.1 + 0.2 * u[1], 0.0))
    sm = np.where(warm | blip, 0.6 * util, 0.0005 * u[2])
    return {"gpu_util": util, "gr_engine_active": np.where(util > 0, util * 0.98, 0.001 * u[3]),
            "sm_active": sm, "sm_occupancy": sm * 0.3, "tensor_active": sm * 0.2 * u[3],
            "dram_active": sm * 0.3}


def _stalled(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Busy-looking but doing nothing: spin kernels, NCCL waits (after a short real warm-up)."""
    warm = ts < seg.start + 0.05 * (seg.end - seg.start)
    base = _training(seg, ts, u)
    stalled = {"gpu_util": 0.97 + 0.03 * u[0], "gr_engine_active": 0.95 + 0.05 * u[2],
               "sm_active": 0.01 + 0.1 * u[1], "sm_occupancy": 0.002 + 0.01 * u[3],
               "tensor_active": 0.0 * u[0], "dram_active": 0.005 * u[3]}
    return {k: np.where(warm, base[k], stalled[k]) for k in stalled}


def _idle(seg: Segment, ts: np.ndarray, u: list[np.ndarray]) -> dict[str, np.ndarray]:
    zero = 0.0 * u[0]
    return {"gpu_util": zero, "gr_engine_active": zero, "sm_active": zero, "sm_occupancy": zero,
            "tensor_active": zero, "dram_active": 0.0002 * u[1]}


_BEHAVIOURS = {"training": _training, "inference": _inference, "notebook": _notebook,
               "stalled": _stalled, "idle": _idle}


def _finish(cols: dict[str, np.ndarray], *, device: Device, segment: Segment) -> dict[str, np.ndarray]:
    """Apply what the hardware can't report: no GPU_UTIL on MIG, no per-pod profiling when shared."""
    nan = np.full(len(cols["gpu_util"]), np.nan)
    if segment.share < 1.0:  # per-process utilisation only; profiling fields are device-wide
        busy = cols["gpu_util"] > 0
        cols["gpu_util"] = np.where(busy, 0.1 + 0.4 * cols["gpu_util"], 0.0)
        for name in ("gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
            cols[name] = nan
    if device.is_mig:  # GPU_UTIL does not exist on MIG; power is GPU-wide, not per instance
        cols["gpu_util"] = nan
        cols["power_watts"] = nan
    if not segment.profiling:
        for name in ("gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
            cols[name] = nan
    for name in ("gpu_util", "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active"):
        cols[name] = np.round(cols[name], 4)
    cols["power_watts"] = np.round(cols["power_watts"], 1)
    return {name: np.asarray(cols[name], dtype=float) for name in SIGNALS}


# --- deterministic noise ----------------------------------------------------------------------

_M64 = (1 << 64) - 1


def _stream(seed: int, device: int, pod: int | None) -> int:
    return ((seed * 1_000_003 + device) * 1_000_033 + (pod if pod is not None else 999_983)) * 16 & _M64


def _uniform(stream: int, ts: np.ndarray) -> np.ndarray:
    """Uniform [0, 1) from splitmix64 of (stream, whole second): same t, same value, always."""
    x = np.asarray(ts, dtype=np.float64).astype(np.int64).astype(np.uint64)
    x = x + np.uint64((stream * 0x9E3779B97F4A7C15) & _M64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def _uid(*parts: object) -> str:
    h = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


# --- the fleet builder --------------------------------------------------------------------------

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
        device = Device(node=node, gpu_uuid=f"GPU-{_uid(self.seed, node, index)}", gpu_index=index,
                        gpu_model=model, fb_total_bytes=GPU_SPECS[model]["fb"],
                        pci_bus_id=f"00000000:{PCI_BUSES[index % 8]:02X}:00.0")
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
                          fb_total_bytes=gpu.fb_total_bytes * size // 8, pci_bus_id=gpu.pci_bus_id,
                          mig_gi_id=gi, mig_profile=name, mig_profile_id=profile_id,
                          mig_placement_start=start, mig_placement_size=size,
                          mig_uuid=f"MIG-{_uid(self.seed, gpu.gpu_uuid, gi)}")
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
        pod_name = f"{owner}-{_uid(index)[:5]}" if owner_kind in ("Deployment", "Job") else (
            f"{owner}-0" if owner_kind in ("Notebook", "StatefulSet") else owner)
        ids = tuple(self.devices[d].mig_uuid or self.devices[d].gpu_uuid for d in devices)
        labeled = self.rng.random() > 0.1  # some pods carry no team label: chargeback falls back to namespace
        pod = Pod(namespace=namespace, pod=pod_name, pod_uid=_uid("pod", self.seed, index), node=dev0.node,
                  owner_kind=owner_kind, owner_name=owner if owner_kind else "", team=team if labeled else "",
                  priority_class=priority, start_ts=start, end_ts=None if end >= self.end else end,
                  gpu_resource=resource, gpu_count=round(share * len(devices), 6), device_ids=ids,
                  labels=(("team", team),) if labeled else ())
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
            return "research-notebooks" if team == "research" else f"{team}-notebooks", "Notebook", f"{user}-nb{n}", ""
        if kind == "inference":
            kind_ = "StatefulSet" if n % 7 == 0 else "Deployment"
            return namespaces[-1], kind_, f"{team}-serve-{n}", "production-critical"
        owner_kind = ("Job", "Job", "Job", "RayCluster", "")[n % 5]
        return namespaces[0], owner_kind, f"{team}-train-{n}", "batch-low"

    def _segment(self, device: int, pod: int | None, start: float, end: float, kind: str, behavior: str, *,
                 share: float = 1.0, fb_frac: float = 0.0, profiling: bool = True, multi_gpu: bool = False) -> None:
        self.segments.append(Segment(device=device, pod=pod, start=start, end=end, behavior=behavior, kind=kind,
                                     share=share, fb_frac=fb_frac, profiling=profiling, multi_gpu=multi_gpu))


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
