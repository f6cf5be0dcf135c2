"""gpuwatch's own series, each family declared once with the function that yields its samples
(kube-state-metrics' generator shape): the Spec names the labels and their order, the function gives
their values for one scrape (None = that label is absent on this series; "hostname" is rendered
under the configured hostname label).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwatch import __version__, fields
from gpuwatch.exporter.spec import DEVICE_LABELS, GPU_LABELS, MIG_LABELS, POD_LABELS, Spec
from gpuwatch.exporter.topology import TOPOLOGY_METRICS
from gpuwatch.model import Allocation, Device
from gpuwatch.sources import DeviceReading

FB_TOTAL, GPU_UTIL = fields.BY_NAME["DCGM_FI_DEV_FB_TOTAL"], fields.BY_NAME["DCGM_FI_DEV_GPU_UTIL"]
FB_USED = fields.BY_NAME["DCGM_FI_DEV_FB_USED"]
Samples = Iterator[tuple[Mapping[str, str | None], float]]


@dataclass(frozen=True)
class Scrape:
    """What one refresh saw: the readings, the kubelet's allocations per device key, the status."""

    readings: Sequence[DeviceReading]
    attributed: Mapping[str, Sequence[Allocation]]
    status: Any  # families.Status
    topology: Any = None  # exporter.topology.TopologyView, or None when topology is not read
    owners: Mapping[int, Any] | None = None  # host PID -> its pod (sources.cgroup_pods), None: not resolved


def device_values(device: Device) -> dict[str, str | None]:
    """dcgm-exporter's device and MIG label values (the parent GPU's identity; None = absent)."""
    mig = device.is_mig
    return {"gpu": str(device.gpu_index), "UUID": device.gpu_uuid, "pci_bus_id": device.pci_bus_id or None,
            "device": f"nvidia{device.gpu_index}", "modelName": device.gpu_model,
            "GPU_I_PROFILE": (device.mig_profile or "") if mig else None,
            "GPU_I_ID": str(device.mig_gi_id) if mig else None, "hostname": device.node}


def _build_info(s: Scrape) -> Samples:
    yield {"version": __version__}, 1


def _driver_info(s: Scrape) -> Samples:
    """One series per node: the versions its devices carry (the source's; None = that label absent)."""
    nodes: dict[str, tuple[str | None, str | None]] = {}
    for r in s.readings:
        driver, cuda = nodes.get(r.device.node, (None, None))
        nodes[r.device.node] = (driver or r.device.driver_version, cuda or r.device.cuda_driver_version)
    for node, (driver, cuda) in sorted(nodes.items()):
        if driver or cuda:
            yield {"hostname": node, "driver_version": driver, "cuda_driver_version": cuda}, 1


def _gpus(s: Scrape) -> Samples:
    yield {}, len({r.device.gpu_uuid for r in s.readings})


def _gpu_up(s: Scrape) -> Samples:
    for r in s.readings:
        yield device_values(r.device), 0 if r.error else 1


def _gpu_lost(s: Scrape) -> Samples:
    for uuid, node in sorted(s.status.lost.items()):
        yield {"UUID": uuid, "hostname": node}, 1


def _memory_total(s: Scrape) -> Samples:
    for r in s.readings:
        total = r.values.get(FB_TOTAL.id)
        total_bytes = total * FB_TOTAL.to_base if total is not None and not math.isnan(total) else r.device.fb_total_bytes
        if total_bytes:
            yield device_values(r.device), total_bytes


def _mig_instance(s: Scrape) -> Samples:
    for r in s.readings:
        d = r.device
        if d.is_mig:
            yield device_values(d) | {"mig_uuid": d.mig_uuid or "", "profile_id": _str(d.mig_profile_id),
                                      "placement_start": _str(d.mig_placement_start),
                                      "placement_size": _str(d.mig_placement_size)}, 1


def _allocation(s: Scrape) -> Samples:
    for r in s.readings:
        for a in s.attributed.get(r.device.key, ()):
            yield device_values(r.device) | {"pod": a.pod, "namespace": a.namespace, "container": a.container,
                                             "resource": a.resource, "vgpu": a.vgpu or ""}, 1


def _process_util(s: Scrape) -> Samples:
    for r in s.readings:
        for p in r.processes:
            util = p.values.get(GPU_UTIL.id)
            if util is not None and not r.device.is_mig:
                yield device_values(r.device) | {"pid": str(p.pid)}, util * GPU_UTIL.to_base


def _process_memory(s: Scrape) -> Samples:
    """Each compute process's GPU memory with the pod its cgroup names (owner pod|host|unknown), for
    orphaned memory held by processes of ended pods or of no pod; served only with --proc-root."""
    if s.owners is None:
        return
    for r in s.readings:
        for p in r.processes:
            used = p.values.get(FB_USED.id)
            if used is None or used != used:
                continue
            owner = s.owners.get(p.pid)
            pod_uid = getattr(owner, "pod_uid", None)
            kind = "pod" if pod_uid else ("host" if owner is None and p.pid in s.owners else "unknown")
            yield device_values(r.device) | {"pid": str(p.pid), "owner": kind, "pod_uid": pod_uid or ""}, \
                used * FB_USED.to_base


def _source_up(s: Scrape) -> Samples:
    yield {"source": s.status.source}, int(s.status.source_ok)
    if s.status.kubelet_ok is not None:
        yield {"source": "kubelet"}, int(s.status.kubelet_ok)
    if s.status.kubernetes_ok is not None:
        yield {"source": "kubernetes"}, int(s.status.kubernetes_ok)
    if s.status.topology_ok is not None:
        yield {"source": "topology"}, int(s.status.topology_ok)


def _source_duration(s: Scrape) -> Samples:
    yield {"source": s.status.source}, round(s.status.source_seconds, 6)
    if s.status.kubelet_ok is not None:
        yield {"source": "kubelet"}, round(s.status.kubelet_seconds, 6)
    if s.status.kubernetes_ok is not None:
        yield {"source": "kubernetes"}, round(s.status.kubernetes_seconds, 6)


def _attribution_error(s: Scrape) -> Samples:
    if s.status.attribution_reason:
        yield {"reason": s.status.attribution_reason}, 1


def _str(value: object) -> str:
    return "" if value is None else str(value)


OWN_METRICS: tuple[Spec, ...] = (
    Spec("gpuwatch_build_info", "gauge", "gpuwatch build; always 1.", ("version",), samples=_build_info),
    Spec("gpuwatch_driver_info", "gauge", "The node's NVIDIA driver version and the CUDA version it supports "
         "(a label is absent where the source cannot tell); always 1.",
         ("hostname", "driver_version", "cuda_driver_version"), samples=_driver_info),
    Spec("gpuwatch_gpus", "gauge", "Number of GPUs the source sees on this node (MIG instances not counted).", (), samples=_gpus),
    Spec("gpuwatch_gpu_up", "gauge", "1 if the GPU (or MIG instance) was read in the last refresh, 0 if reading it failed.",
         (*DEVICE_LABELS, *MIG_LABELS, "hostname"), samples=_gpu_up),
    Spec("gpuwatch_gpu_lost", "gauge", "1 for a GPU that fell off the bus (seen earlier or reported lost, not readable now).",
         ("UUID", "hostname"), samples=_gpu_lost),
    Spec("gpuwatch_gpu_memory_total_bytes", "gauge", "Framebuffer size of the GPU or MIG instance (bytes).",
         (*DEVICE_LABELS, *MIG_LABELS, "hostname"), samples=_memory_total),
    Spec("gpuwatch_mig_instance_info", "gauge", "MIG GPU instance: profile id and placement in memory slices; always 1.",
         (*GPU_LABELS[:4], "hostname", *MIG_LABELS, "mig_uuid", "profile_id", "placement_start", "placement_size"), samples=_mig_instance),
    Spec("gpuwatch_gpu_allocation_info", "gauge",
         "A container's allocation of a GPU or MIG instance per the kubelet; one series per sharing pod; always 1.",
         (*GPU_LABELS, *MIG_LABELS, *POD_LABELS, "resource", "vgpu"), samples=_allocation),
    Spec("gpuwatch_process_gpu_utilization_ratio", "gauge",
         "Per-process SM utilization on a (time-sliced) GPU from NVML, ratio 0-1.",
         (*DEVICE_LABELS, "hostname", "pid"), samples=_process_util),
    Spec("gpuwatch_process_memory_bytes", "gauge",
         "GPU memory a compute process holds (NVML, host PID), with the pod its cgroup belongs to: owner = pod "
         "(pod_uid set) | host (in no pod) | unknown (exited or unreadable). Served with --proc-root.",
         (*DEVICE_LABELS, "hostname", "pid", "owner", "pod_uid"), samples=_process_memory),
    Spec("gpuwatch_source_up", "gauge", "1 if the last read of the source succeeded (source = dcgm|nvml|simulate|kubelet|kubernetes: the pod "
         "UID/labels list|topology: the driver's GPU topology).",
         ("source",), samples=_source_up),
    Spec("gpuwatch_source_duration_seconds", "gauge", "Duration of the last read of the source (seconds).", ("source",), samples=_source_duration),
    Spec("gpuwatch_attribution_error_info", "gauge",
         "1 while pod attribution fails (reason = socket_missing|timeout|unavailable|error); series then carry no pod labels.",
         ("reason",), samples=_attribution_error),
    *TOPOLOGY_METRICS,
)
