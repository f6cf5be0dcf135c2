"""Planting pods and memory on the time a fleet leaves unallocated, without touching anything else.

``FreeTime`` keeps each device's unallocated spans (time-sliced GPUs excluded) and carves out what
is taken; ``Planter`` adds pods, segments, states, health events and ground truth with its own
random generator, and ``Planter.fleet()`` returns the fleet with them: every original pod segment
as it was, the unallocated segments cut around what was planted (and holding the captured empty
baseline, catalog.EMPTY_FB_MIB), the planted segments after them.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gpuwatch.fleet.catalog import COST_CENTERS, EMPTY_FB_MIB, TEAMS, Fleet, Segment, uid
from gpuwatch.model import Pod
from gpuwatch.units import MIB

HOUR = 3600.0


class FreeTime:
    """Each device's unallocated spans within ``[lo, hi)``; ``take`` carves one range out."""

    def __init__(self, fleet: Fleet, *, lo: float, hi: float):
        shared = {s.device for s in fleet.segments if s.share < 1.0}
        raw: dict[int, list[tuple[float, float]]] = {}
        self.pod_ends: set[tuple[int, float]] = set()  # (device, t): a pod's segment ends at t
        for s in fleet.segments:
            if s.pod is not None:
                self.pod_ends.add((s.device, s.end))
            elif s.device not in shared:
                raw.setdefault(s.device, []).append((s.start, s.end))
        self.spans = {d: _clip(_merge(spans), (lo, hi)) for d, spans in raw.items()}
        self.taken: dict[int, list[tuple[float, float]]] = {}

    def find(self, devices: list[int], need: float, *, after_pod: bool = False) -> list[tuple[int, float, float]]:
        """(device, lo, hi) of every span with room for ``need`` seconds from a whole second on
        ``devices`` (only those that open right as a pod's segment ends, with ``after_pod``)."""
        return [(d, lo, hi) for d in devices for lo, hi in self.spans.get(d, ())
                if hi - lo >= need + 1.0 and (not after_pod or (d, lo) in self.pod_ends)]

    def end_at(self, device: int, t: float) -> float | None:
        """The end of ``device``'s span holding instant ``t``, or None if it is taken at ``t``."""
        return next((hi for lo, hi in self.spans.get(device, ()) if lo <= t < hi), None)

    def take(self, device: int, span: tuple[float, float], *, pod: bool) -> None:
        """Carve ``span`` out of ``device``'s free time (it must lie in one span); ``pod``: a pod held it."""
        lo, hi = span
        spans = self.spans[device]
        i = next(i for i, (a, b) in enumerate(spans) if a <= lo and hi <= b)
        a, b = spans.pop(i)
        spans[i:i] = [piece for piece in ((a, lo), (hi, b)) if piece[1] > piece[0]]
        self.taken.setdefault(device, []).append((lo, hi))
        if pod:
            self.pod_ends.add((device, hi))


class Planter:
    """What a failure mode adds to ``fleet``: pods (with truth rows), segments, pod states, health
    events and failures.csv rows; random choices from ``np.random.default_rng([seed, 15])``."""

    def __init__(self, fleet: Fleet, *, margins: tuple[float, float] = (HOUR, 2 * HOUR)):
        self.base, self.rng = fleet, np.random.default_rng([fleet.seed, 15])
        self.devices = list(fleet.devices)
        self.free = FreeTime(fleet, lo=fleet.start + margins[0], hi=fleet.end - margins[1])
        self.profiling = {s.device: s.profiling for s in fleet.segments}
        self.shared = {s.device for s in fleet.segments if s.share < 1.0}
        self.excluded: set[str] = set()  # nodes another failure mode owns
        self.pods: list[Pod] = []
        self.truth: list[dict] = []
        self.segments: list[Segment] = []
        self.status: list[dict] = []
        self.health: list[dict] = []
        self.failures: list[dict] = []
        self.processes: list[dict] = []

    def whole(self) -> list[int]:
        """Whole, unshared GPUs on nodes no other failure mode owns."""
        return [i for i, d in enumerate(self.devices)
                if not d.is_mig and i not in self.shared and d.node not in self.excluded]

    def mig(self) -> list[int]:
        """MIG instances on nodes no other failure mode owns."""
        return [i for i, d in enumerate(self.devices) if d.is_mig and d.node not in self.excluded]

    def pick(self, options: list):
        """One of ``options`` at random, None if there are none."""
        return options[int(self.rng.integers(len(options)))] if options else None

    def uniform(self, lo: float, hi: float) -> float:
        """A whole number of seconds in [lo, hi]."""
        return float(round(self.rng.uniform(lo, hi)))

    def start_in(self, span: tuple[float, float], need: float) -> float:
        """A whole second in ``span`` from which ``need`` seconds still fit."""
        lo, hi = span
        return float(np.ceil(lo + self.rng.uniform(0.0, max(hi - lo - need - 1.0, 0.0))))

    def empty_bytes(self, device: int) -> float:
        """What ``device`` holds when empty (catalog.EMPTY_FB_MIB)."""
        return EMPTY_FB_MIB[self.devices[device].mig_placement_size] * MIB

    def team(self) -> str:
        """A team at random."""
        return str(self.rng.choice(sorted(TEAMS)))

    def next_index(self) -> int:
        """The index the next planted pod gets in the fleet's pods."""
        return len(self.base.pods) + len(self.pods)

    def pod(self, devices: list[int], start: float, end: float, *, stem: str, behavior: str,
            team: str | None = None, owner: str | None = None, name: str | None = None) -> int:
        """A Job's pod on ``devices`` over [start, end), in its team's first namespace, with its truth
        row; returns its index into the planted fleet's pods."""
        index = self.next_index()
        team = team or self.team()
        owner = owner or f"{team}-{stem}-{index}"
        dev0 = self.devices[devices[0]]
        resource = f"nvidia.com/mig-{dev0.mig_profile}" if dev0.is_mig else "nvidia.com/gpu"
        pod = Pod(namespace=TEAMS[team][0], pod=name or f"{owner}-{uid(index)[:5]}", node=dev0.node,
                  pod_uid=uid("pod", self.base.seed, index), owner_kind="Job", owner_name=owner, team=team,
                  priority_class="batch-low", start_ts=start, end_ts=end, gpu_resource=resource,
                  gpu_count=float(len(devices)),
                  device_ids=tuple(self.devices[d].mig_uuid or self.devices[d].gpu_uuid for d in devices),
                  labels=(("team", team), ("cost_center", COST_CENTERS[team])))
        self.pods.append(pod)
        self.truth.append({"namespace": pod.namespace, "pod": pod.pod, "behavior": behavior,
                           "placement": "mig" if dev0.is_mig else "whole", "team": team})
        return index

    def get(self, index: int) -> Pod:
        """The planted pod at ``index`` of the fleet's pods."""
        return self.pods[index - len(self.base.pods)]

    def occupy(self, device: int, span: tuple[float, float], *, pod: int | None, kind: str, behavior: str,
               fb_frac: float = 0.0, fb_bytes: float | None = None, multi_gpu: bool = False) -> None:
        """``device`` held over ``span`` [lo, hi) by ``pod`` (None: memory held by nobody)."""
        lo, hi = span
        self.free.take(device, span, pod=pod is not None)
        self.segments.append(Segment(device=device, pod=pod, start=lo, end=hi, behavior=behavior, kind=kind,
                                     fb_frac=fb_frac, profiling=self.profiling[device], multi_gpu=multi_gpu,
                                     fb_bytes=fb_bytes))

    def event(self, device: int, *, ts: float, kind: str, code: int | None) -> None:
        """A health event of ``device``'s GPU (model.HEALTH_KINDS)."""
        d = self.devices[device]
        self.health.append({"ts": float(ts), "node": d.node, "gpu_uuid": d.gpu_uuid, "kind": kind, "code": code})

    def process(self, device: int, span: tuple[float, float], *, pid: int, fb_bytes: float,
                pod_uid: str | None, in_pod: int | None, every: float = 60.0) -> None:
        """A compute process on ``device`` holding ``fb_bytes`` over ``span``, read every ``every``
        seconds (the exporter's --proc-root series): in pod ``pod_uid`` (in_pod 1), no pod (0), or
        its cgroup unreadable (None)."""
        d, (lo, hi) = self.devices[device], span
        for ts in np.arange(np.ceil(lo / every) * every, hi, every):
            self.processes.append({"ts": float(ts), "node": d.node, "gpu_uuid": d.gpu_uuid, "mig_gi_id": d.mig_gi_id,
                                   "pid": pid, "pod_uid": pod_uid, "in_pod": in_pod, "fb_used_bytes": float(fb_bytes)})

    def fail(self, finding: str, cause: str, *, device: int | None = None, node: str | None = None,
             pod: int | None = None, job: str | None = None, namespace: str | None = None) -> None:
        """One failures.csv row: the finding, its key, and the cause."""
        d = None if device is None else self.devices[device]
        p = None if pod is None else self.get(pod)
        self.failures.append({"finding": finding, "node": d.node if d else node, "gpu_uuid": d and d.gpu_uuid,
                              "mig_gi_id": d and d.mig_gi_id, "namespace": p.namespace if p else namespace,
                              "pod": p and p.pod, "job": job, "cause": cause})

    def set_driver(self, node: str, driver: tuple[str, str]) -> None:
        self.devices = [dataclasses.replace(d, driver_version=driver[0], cuda_driver_version=driver[1])
                        if d.node == node else d for d in self.devices]

    def fleet(self) -> Fleet:
        """The base fleet with everything planted."""
        base = self.base
        segments = [*_carve(base.segments, self.free.taken, empty_bytes=self.empty_bytes), *self.segments]
        return dataclasses.replace(
            base, devices=tuple(self.devices), pods=base.pods + tuple(self.pods), segments=tuple(segments),
            truth=base.truth + tuple(self.truth), pod_status=base.pod_status + tuple(self.status),
            health=tuple(sorted(self.health, key=lambda e: (e["ts"], e["node"], e["gpu_uuid"]))),
            failures=tuple(self.failures),
            processes=tuple(sorted(self.processes, key=lambda p: (p["ts"], p["node"], p["gpu_uuid"], p["pid"]))))


def _carve(segments, taken: dict[int, list[tuple[float, float]]], *, empty_bytes) -> list[Segment]:
    """Pod segments as they are; each unallocated one minus what was taken on its device, holding
    its device's empty baseline."""
    out = []
    for s in segments:
        if s.pod is not None:
            out.append(s)
            continue
        pieces = [(s.start, s.end)]
        for lo, hi in sorted(taken.get(s.device, ())):
            pieces = [p for a, b in pieces for p in ((a, min(b, lo)), (max(a, hi), b)) if p[1] > p[0]]
        out += [dataclasses.replace(s, start=a, end=b, fb_bytes=empty_bytes(s.device)) for a, b in pieces]
    return out


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _clip(spans: list[tuple[float, float]], window: tuple[float, float]) -> list[tuple[float, float]]:
    lo, hi = window
    return [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) > max(a, lo)]
