"""Pure: one refresh's state -> fresh metric families, in METRICS order (no I/O, no clock).

Every raw DCGM series is emitted once per device, or — when the kubelet says pods hold the
device — once per (pod, container) holding it, with ``vgpu`` for time-sliced replicas, so pods
sharing a GPU never overwrite each other. Values missing or NaN are skipped, never printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuwatch import fields
from gpuwatch.exporter.metrics import METRICS, OWN_METRICS, RAW_METRICS
from gpuwatch.exporter.own import Scrape, device_values
from gpuwatch.model import Allocation, Device
from gpuwatch.sources import DeviceReading, Snapshot

_DRIVER = {"4.8": fields.BY_NAME["DCGM_FI_DRIVER_VERSION"].name,
           "4.9": fields.BY_NAME["DCGM_FI_DRIVER_VERSION"].name49}


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
    naming: str = "4.8"  # dcgm-exporter naming generation of the DCGM series: "4.8" or "4.9" (fields.py)


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
        served, factor = _served(spec, options.naming)
        if served is not None:
            out[spec.name] = Metric(served.name, served.help, served.type)
        samples, fid, name = out[spec.name].samples, spec.field_id, out[spec.name].name
        for series in targets:
            for labels, values in series:
                v = values.get(fid)
                if v is not None and v == v:
                    samples.append(Sample(name, labels, v * factor if factor != 1.0 else v, timestamp))
    scrape = Scrape(readings, attributed, status)
    for spec in OWN_METRICS:
        for values, value in spec.samples(scrape):
            out[spec.name].samples.append(Sample(spec.name, _labels(spec.labels, values, options), value, timestamp))
    return list(out.values())


def _served(spec, naming: str) -> tuple[fields.Name | None, float]:
    """The name, HELP, type this generation serves ``spec`` under, and the factor from the source's
    unit (the 4.8 one) to it; (None, 1.0) where it is the 4.8 declaration."""
    name = fields.name_of(fields.BY_ID[spec.field_id], naming)
    if name is None or name.name == spec.name:
        return None, 1.0
    return name, name.field.to_base / name.to_base


def _labels(names: tuple[str, ...], values: Mapping[str, str | None], options: Options) -> dict[str, str]:
    """The family's labels in its declared order; absent ones dropped; hostname under its configured name."""
    return {(options.hostname_label if n == "hostname" else n): values[n] for n in names if values.get(n) is not None}


def device_labels(device: Device, hostname_label: str = "hostname", driver: str | None = None,
                  naming: str = "4.8") -> dict[str, str]:
    """dcgm-exporter's labels for a device: the parent GPU's, then MIG, hostname, driver version
    (under the driver field's name in that naming generation)."""
    labels = {(hostname_label if k == "hostname" else k): v for k, v in device_values(device).items() if v is not None}
    if driver:
        labels[_DRIVER[naming]] = driver
    return labels


def _targets(reading: DeviceReading, allocations: Sequence[Allocation], options: Options,
             driver: str | None) -> list[tuple[dict, Mapping]]:
    """(labels, values) per series this device yields: itself, or each allocation holding it."""
    base = device_labels(reading.device, options.hostname_label, driver, options.naming)
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
