"""Pure: one refresh's state -> fresh metric families, in METRICS order (no I/O, no clock).

Every raw DCGM series is emitted once per device, or — when the kubelet says pods hold the
device — once per (pod, container) holding it, with ``vgpu`` for time-sliced replicas, so pods
sharing a GPU never overwrite each other. Values missing or NaN are skipped, never printed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuwatch import __version__, fields
from gpuwatch.exporter.metrics import METRICS, RAW_METRICS
from gpuwatch.model import Allocation, Device
from gpuwatch.sources import DeviceReading, Snapshot

FB_TOTAL, GPU_UTIL = fields.BY_NAME["DCGM_FI_DEV_FB_TOTAL"], fields.BY_NAME["DCGM_FI_DEV_GPU_UTIL"]


@dataclass(frozen=True)
class Status:
    """How the last refresh went, for gpuwatch_source_* and /healthz."""

    source: str
    source_ok: bool
    source_seconds: float
    source_error: str | None = None
    kubelet_ok: bool | None = None  # None = attribution not configured
    kubelet_seconds: float = 0.0
    attribution_reason: str | None = None
    attribution_error: str | None = None
    unknown_devices: tuple[str, ...] = ()  # kubelet device ids that match no device
    lost: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> hostname


@dataclass(frozen=True)
class Options:
    hostname_label: str = "hostname"
    profiling: bool = True


def build(snapshot: Snapshot | None, attributed: Mapping[str, Sequence[Allocation]], status: Status, *,
          options: Options | None = None, timestamp: float | None = None) -> list:
    """The scrape's metric families (prometheus_client ``Metric``), in METRICS order."""
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

    options = options or Options()
    readings = snapshot.readings if snapshot else ()
    driver = snapshot.driver_version if snapshot else None
    targets = [_targets(r, attributed.get(r.device.key, ()), options, driver) for r in readings if r.error is None]
    out = {}
    for spec in METRICS:
        out[spec.name] = Metric(spec.name, spec.help, spec.type)
    for spec in RAW_METRICS:
        if spec.profiling and not options.profiling:
            continue
        samples, fid, name = out[spec.name].samples, spec.field_id, spec.name
        for series in targets:
            for labels, values in series:
                v = values.get(fid)
                if v is not None and v == v:
                    samples.append(Sample(name, labels, v, timestamp))
    own = _own_samples(readings, attributed, status, options)
    for name, labels, value in own:
        out[name].samples.append(Sample(name, labels, value, timestamp))
    return list(out.values())


def device_labels(device: Device, hostname_label: str = "hostname", driver: str | None = None) -> dict[str, str]:
    """dcgm-exporter's labels for a device: the parent GPU's, then MIG, hostname, driver version."""
    labels = {"gpu": str(device.gpu_index), "UUID": device.gpu_uuid}
    if device.pci_bus_id:
        labels["pci_bus_id"] = device.pci_bus_id
    labels |= {"device": f"nvidia{device.gpu_index}", "modelName": device.gpu_model}
    if device.is_mig:
        labels |= {"GPU_I_PROFILE": device.mig_profile or "", "GPU_I_ID": str(device.mig_gi_id)}
    labels[hostname_label] = device.node
    if driver:
        labels["DCGM_FI_DRIVER_VERSION"] = driver
    return labels


def _targets(reading: DeviceReading, allocations: Sequence[Allocation], options: Options,
             driver: str | None) -> list[tuple[dict, Mapping]]:
    """(labels, values) per series this device yields: itself, or each allocation holding it."""
    base = device_labels(reading.device, options.hostname_label, driver)
    if not allocations:
        return [(base, reading.values)]
    per_pod = _per_pod_values(reading)
    out = []
    for a in allocations:
        labels = base | {"pod": a.pod, "namespace": a.namespace, "container": a.container}
        if a.vgpu is not None:
            labels["vgpu"] = a.vgpu
        values = reading.values
        if per_pod is not None:  # time-sliced: this pod's own processes, not the whole GPU
            values = {**reading.values, **{fid: 0 for fid in per_pod[None]}, **per_pod.get((a.namespace, a.pod), {})}
        out.append((labels, values))
    return out


def _per_pod_values(reading: DeviceReading) -> dict | None:
    """Sum of pod-attributed process values per (namespace, pod); key None = the fields covered."""
    procs = [p for p in reading.processes if p.pod is not None]
    if not procs:
        return None
    sums: dict = {None: set()}
    for p in procs:
        pod = sums.setdefault((p.namespace, p.pod), {})
        for fid, v in p.values.items():
            pod[fid] = pod.get(fid, 0) + v
            sums[None].add(fid)
    return sums


def _own_samples(readings: Sequence[DeviceReading], attributed: Mapping[str, Sequence[Allocation]],
                 status: Status, options: Options) -> list[tuple[str, dict, float]]:
    host = options.hostname_label
    out: list[tuple[str, dict, float]] = [("gpuwatch_build_info", {"version": __version__}, 1)]
    gpus = {r.device.gpu_uuid for r in readings}
    out.append(("gpuwatch_gpus", {}, len(gpus)))
    for r in readings:
        out.extend(_device_samples(r, attributed.get(r.device.key, ()), host))
    for uuid, node in sorted(status.lost.items()):
        out.append(("gpuwatch_gpu_lost", {"UUID": uuid, host: node}, 1))
    out.extend(_status_samples(status))
    return out


def _device_samples(r: DeviceReading, allocations: Sequence[Allocation], host: str) -> list:
    d, out = r.device, []
    labels = device_labels(d, host)
    out.append(("gpuwatch_gpu_up", labels, 0 if r.error else 1))
    total = r.values.get(FB_TOTAL.id)
    total_bytes = total * FB_TOTAL.to_base if total is not None and not math.isnan(total) else d.fb_total_bytes
    if total_bytes:
        out.append(("gpuwatch_gpu_memory_total_bytes", labels, total_bytes))
    short = {"gpu": str(d.gpu_index), "UUID": d.gpu_uuid, "device": f"nvidia{d.gpu_index}", "modelName": d.gpu_model,
             host: d.node}
    mig = {"GPU_I_PROFILE": d.mig_profile or "", "GPU_I_ID": str(d.mig_gi_id)} if d.is_mig else {}
    if d.is_mig:
        out.append(("gpuwatch_mig_instance_info", short | mig | {
            "mig_uuid": d.mig_uuid or "", "profile_id": _str(d.mig_profile_id),
            "placement_start": _str(d.mig_placement_start), "placement_size": _str(d.mig_placement_size)}, 1))
    for a in allocations:
        out.append(("gpuwatch_gpu_allocation_info", short | mig | {
            "pod": a.pod, "namespace": a.namespace, "container": a.container, "resource": a.resource,
            "vgpu": a.vgpu or ""}, 1))
    gpu_labels = {k: v for k, v in labels.items() if k not in ("GPU_I_PROFILE", "GPU_I_ID")}
    for p in r.processes:
        util = p.values.get(GPU_UTIL.id)
        if util is not None and not d.is_mig:
            out.append(("gpuwatch_process_gpu_utilization_ratio", gpu_labels | {"pid": str(p.pid)}, util * GPU_UTIL.to_base))
    return out


def _status_samples(status: Status) -> list:
    out = [("gpuwatch_source_up", {"source": status.source}, int(status.source_ok)),
           ("gpuwatch_source_duration_seconds", {"source": status.source}, round(status.source_seconds, 6))]
    if status.kubelet_ok is not None:
        out.append(("gpuwatch_source_up", {"source": "kubelet"}, int(status.kubelet_ok)))
        out.append(("gpuwatch_source_duration_seconds", {"source": "kubelet"}, round(status.kubelet_seconds, 6)))
    if status.attribution_reason:
        out.append(("gpuwatch_attribution_error_info", {"reason": status.attribution_reason}, 1))
    return out


def _str(value: object) -> str:
    return "" if value is None else str(value)
