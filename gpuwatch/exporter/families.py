"""Pure: one refresh's state -> fresh metric families, in METRICS order (no I/O, no clock).

Every raw DCGM series is emitted once per device (a whole GPU or a MIG GPU instance). A MIG GPU's
device-wide fields (fields.DEVICE_WIDE) are the board's, which DCGM serves on every instance: with
``Options.device_wide`` "per-instance" (dcgm-exporter's shape) each instance's series carries them;
with "per-gpu" they are served once, on a series with the GPU's labels, so ``sum`` and ``sum by (UUID)``
are the boards' values. A device one pod holds carries that pod's labels. A device several
pods share (time-slicing, MPS) is served as ``Options.shared_gpus`` says (exporter/compat.py):
``one-pod`` labels its one series with the pod the kubelet listed last (dcgm-exporter's rule);
``per-pod`` keeps the device's series without pod labels and adds, for the fields the source
measures per process (GPU_UTIL, FB_USED), each pod's own share as a series with its labels, the
device's series then carrying the unattributed remainder. Every sharer is always listed in
``gpuwatch_gpu_allocation_info``. Values missing or NaN are skipped, never printed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuwatch import fields
from gpuwatch.exporter.counters import Counter
from gpuwatch.exporter.exp import ExpFamily
from gpuwatch.exporter.metrics import OWN_METRICS
from gpuwatch.exporter.own import Scrape, device_values
from gpuwatch.exporter.spec import MIG_LABELS
from gpuwatch.exporter.topology import TopologyView
from gpuwatch.model import Allocation, Device
from gpuwatch.sources import DeviceReading, Snapshot
from gpuwatch.sources.kube_pods import PodMeta

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
    kubernetes_ok: bool | None = None  # None = pod UID/labels not configured
    kubernetes_seconds: float = 0.0
    kubernetes_error: str | None = None
    lost: Mapping[str, str] = field(default_factory=dict)  # GPU UUID -> hostname
    topology_ok: bool | None = None  # None = topology not read; False = the driver could not answer
    topology_error: str | None = None


@dataclass(frozen=True)
class Options:
    hostname_label: str = "hostname"
    profiling: bool = True
    naming: str = "4.8"  # dcgm-exporter naming generation of the DCGM series: "4.8" or "4.9" (fields.py)
    shared_gpus: str = "per-pod"  # a shared device's series: "one-pod" | "per-pod" (compat.SHARED_MODES)
    device_wide: str = "per-instance"  # a MIG GPU's device-wide fields: "per-instance" | "per-gpu" (compat)
    counters: tuple[Counter, ...] | None = None  # a counters file's rows (-f): the DCGM series served instead
    pod_uid: bool = False  # --kubernetes-enable-pod-uid: pod_uid on attributed series


def build(snapshot: Snapshot | None, attributed: Mapping[str, Sequence[Allocation]], status: Status, *,
          options: Options | None = None, timestamp: float | None = None,
          listed_last: Mapping[str, Allocation] | None = None, exp: Sequence[ExpFamily] = (),
          pods: Mapping[tuple[str, str], PodMeta] | None = None, topology: TopologyView | None = None,
          owners: Mapping[int, object] | None = None) -> list:
    """The scrape's metric families (prometheus_client ``Metric``), in METRICS order.

    ``attributed``: device key -> every allocation holding it; ``listed_last``: device key -> the
    allocation the kubelet listed last (attribution.Attribution.last; default: the last given);
    ``exp``: the DCGM_EXP_* families computed this refresh (exporter/exp.py), served after the DCGM ones;
    ``pods``: (namespace, pod) -> UID and labels from the Kubernetes API (sources/kube_pods.py), added
    to attributed series after their own labels (``pod_uid`` only with ``options.pod_uid``);
    ``topology``: the node's topology and free GPUs (exporter/topology.py), None when not read;
    ``owners``: host PID -> its pod (sources/cgroup_pods.py: PodRef, None = in no pod, Unknown), None
    when processes are not resolved (no --proc-root)."""
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

    options = options or Options()
    readings = snapshot.readings if snapshot else ()
    driver = snapshot.driver_version if snapshot else None
    listed_last = listed_last or {}
    ok = [r for r in readings if r.error is None]
    targets = [_with_pod_meta(_targets(r, attributed.get(r.device.key, ()), listed_last.get(r.device.key), options,
                                       driver), pods, options) for r in ok]
    if options.device_wide == "per-gpu":
        targets = _device_wide_once(ok, targets, options, driver)
    raw = _raw_families(options)
    if options.counters is not None:  # a counters file replaces the built-in DCGM set, in its order
        out = {name: Metric(name, text, kind) for name, _, kind, text, _ in raw}
    else:  # the generation's default set, in its order
        out = {name: Metric(*_declared(name, fid, kind, text, options.naming)) for name, fid, kind, text, _ in raw}
    out |= {spec.name: Metric(spec.name, spec.help, spec.type) for spec in OWN_METRICS}
    for name, fid, _kind, _text, factor in raw:
        samples, served = out[name].samples, out[name].name
        for series in targets:
            for labels, values in series:
                v = values.get(fid)
                if v is not None and v == v:
                    samples.append(Sample(served, labels, v * factor if factor != 1.0 else v, timestamp))
    bases = {r.device.key: device_labels(r.device, options.hostname_label, driver, options.naming) for r in readings}
    exp_families = [_exp_family(family, bases, timestamp) for family in exp]
    scrape = Scrape(readings, attributed, status, topology, owners)
    for spec in OWN_METRICS:
        for values, value in spec.samples(scrape):
            out[spec.name].samples.append(Sample(spec.name, _labels(spec.labels, values, options), value, timestamp))
    own = {spec.name for spec in OWN_METRICS}
    return [f for n, f in out.items() if n not in own] + exp_families + [f for n, f in out.items() if n in own]


def _raw_families(options: Options) -> list[tuple[str, int, str, str, float]]:
    """(name, field id, TYPE, HELP, factor from the source's DCGM unit) of each DCGM series served:
    the built-in set in ``options.naming``'s names, or the counters file's rows (label rows are labels)."""
    if options.counters is not None:
        return [(c.name, c.field_id, c.type, c.help, _factor(c.name)) for c in options.counters
                if c.field_id is not None and c.type != "label"]
    out = []
    for f in fields.series(options.naming):
        if f.profiling and not options.profiling:
            continue
        served = fields.name_of(f, options.naming)
        out.append((f.name, f.id, served.type, served.help, f.to_base / served.to_base))
    return out


def _declared(name: str, fid: int, kind: str, text: str, naming: str) -> tuple[str, str, str]:
    """(served name, HELP, TYPE) of a built-in DCGM family in ``naming``'s generation."""
    served = fields.name_of(fields.BY_ID[fid], naming)
    return (served.name if served is not None else name), text, kind


def _factor(name: str) -> float:
    """Factor from the source's DCGM unit to the unit the served ``name`` declares (1 if unknown)."""
    known = fields.NAMES.get(name)
    return known.field.to_base / known.to_base if known is not None else 1.0


def _exp_family(family: ExpFamily, bases: Mapping[str, dict], timestamp: float | None):
    from prometheus_client.metrics_core import Metric
    from prometheus_client.samples import Sample

    out = Metric(family.name, family.help, family.type)
    for s in family.samples:
        if s.device_key in bases:
            out.samples.append(Sample(family.name, bases[s.device_key] | dict(s.labels), s.value, timestamp))
    return out


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


def _targets(reading: DeviceReading, allocations: Sequence[Allocation], last: Allocation | None,
             options: Options, driver: str | None) -> list[tuple[dict, Mapping]]:
    """(labels, values) per series this device yields (see the module docstring)."""
    base = device_labels(reading.device, options.hostname_label, driver, options.naming)
    if not allocations:
        return [(base, reading.values)]
    if options.shared_gpus == "one-pod":
        return [(base | _pod_labels(last or allocations[-1]), reading.values)]
    pods: dict[tuple[str, str], Allocation] = {}
    for a in allocations:
        pods.setdefault((a.namespace, a.pod), a)  # each pod's first container
    if len(pods) == 1:
        return [(base | _pod_labels(allocations[0]), reading.values)]
    shares = _pod_shares(reading, list(pods))
    if shares is None:  # no per-process values: the device as a whole, its sharers in allocation_info
        return [(base, reading.values)]
    remainder, per_pod = shares
    out = [(base, {**reading.values, **remainder})]
    out += [(base | _pod_labels(pods[key]), values) for key, values in sorted(per_pod.items())]
    return out


def _device_wide_once(readings: Sequence[DeviceReading], targets: list[list[tuple[dict, Mapping]]],
                      options: Options, driver: str | None) -> list[list[tuple[dict, Mapping]]]:
    """``targets`` with a MIG GPU's device-wide fields (fields.DEVICE_WIDE) taken off its instances'
    series and served once, on a series with the GPU's own labels (no GPU_I_*, no pod): DCGM reads them
    for the board, so each instance carries the same value (the first instance's is served)."""
    out, boards = [], {}
    for reading, series in zip(readings, targets, strict=True):
        if not reading.device.is_mig:
            out.append(series)
            continue
        out.append([(labels, {k: v for k, v in values.items() if k not in fields.DEVICE_WIDE})
                    for labels, values in series])
        labels = device_labels(reading.device, options.hostname_label, driver, options.naming)
        _, board = boards.setdefault(reading.device.gpu_uuid,
                                     ({k: v for k, v in labels.items() if k not in MIG_LABELS}, {}))
        for fid in sorted(fields.DEVICE_WIDE & set(reading.values)):
            v = reading.values[fid]
            if v is not None and v == v:
                board.setdefault(fid, v)
    return out + [[(labels, values)] for labels, values in boards.values() if values]


def _with_pod_meta(series: list[tuple[dict, Mapping]], pods: Mapping | None, options: Options) -> list:
    """Each attributed series' labels plus its pod's ``pod_uid`` and labels (never replacing one)."""
    if not pods:
        return series
    out = []
    for labels, values in series:
        meta = pods.get((labels.get("namespace"), labels.get("pod"))) if "pod" in labels else None
        if meta is not None:
            extra = {"pod_uid": meta.uid or ""} if options.pod_uid else {}
            labels = labels | {k: v for k, v in {**extra, **meta.labels}.items() if k not in labels}
        out.append((labels, values))
    return out


def _pod_labels(a: Allocation) -> dict[str, str]:
    return {"pod": a.pod, "namespace": a.namespace, "container": a.container}


def _pod_shares(reading: DeviceReading, pods: Sequence[tuple[str, str]]) -> tuple[dict, dict] | None:
    """The device's unattributed remainder and each sharing pod's own values, for the fields the
    source measures per process (their sum per field = the device's value; None = no process values).

    A pod without processes gets 0; processes of pods not holding the device count in the remainder.
    Where the pods' sum exceeds the device's value (per-process sampling), the pods are scaled down to
    it, integer fields by largest remainder so that the series still add up exactly."""
    procs = [p for p in reading.processes if p.pod is not None]
    if not procs:
        return None
    covered = sorted({fid for p in procs for fid in p.values})
    per_pod: dict[tuple[str, str], dict] = {key: {} for key in pods}
    remainder: dict[int, float] = {}
    for fid in covered:
        own = {key: sum(p.values.get(fid, 0) for p in procs if (p.namespace, p.pod) == key) for key in pods}
        device = reading.values.get(fid)
        if device is None or device != device:
            continue  # the device's value is unknown: no split can be made for this field
        total = sum(own.values())
        if total > device:
            own = _scaled(own, device, integer=all(isinstance(v, int) for v in own.values()))
        for key in pods:
            per_pod[key][fid] = own[key]
        remainder[fid] = device - sum(own.values())
    return remainder, per_pod


def _scaled(values: dict, to: float, *, integer: bool) -> dict:
    """``values`` scaled so they sum to ``to`` (integers by largest remainder)."""
    total = sum(values.values())
    exact = {k: v * to / total for k, v in values.items()}
    if not integer:
        return exact
    out = {k: int(v) for k, v in exact.items()}
    by_fraction = sorted(exact, key=lambda k: (out[k] - exact[k], k))
    for k in by_fraction[:round(to) - sum(out.values())]:
        out[k] += 1
    return out
