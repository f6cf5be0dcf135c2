"""The ``simulate`` source: the deterministic synthetic fleet (gpuwatch.fleet) served through
the real exporter path, converted to DCGM units exactly as the dcgm/nvml sources report them.

The fleet's week is positioned so wall-clock "now" is inside it (start = midnight UTC three days
before start-up, 7 days long); past its end the clock wraps around to the start.

What the fleet models (utilisation, FB, power, profiling ratios, NVLink bytes) is served as it is.
Everything else every default dcgm-exporter field needs is synthetic, derived from those readings,
the model's facts (GPU_SPECS) and a hash of the GPU's UUID, never from the fleet's random draws
(simulate_extra.py says how, field by field): GPU temperature from the busiest occupant's activity
(so dashboards keyed on DCGM_FI_DEV_GPU_TEMP, Grafana 12239, list every simulated GPU), HBM
temperature from it; SM/memory clocks idle or boosted; energy as power integrated on a fixed grid
(a counter of wall-clock time, so it keeps rising when the fleet's clock wraps); PCIe traffic, rare
PCIe replays, XIDs and remapped rows; encoder/decoder use by video-serving pods. FB reserved is 0
(the fleet's FB_FREE already counts the driver's reserve as free; see simulate_extra).

As dcgm-exporter serves a MIG GPU (per GPU instance only): GPU-wide fields (temperatures, clocks,
power, energy, PCIe replays, XID, remapped rows) repeat on every instance; utilisation, memory-copy,
encoder/decoder, PCIe and NVLink throughput do not exist per instance. The fleet leaves a MIG GPU's
power unknown: it is the board's idle power plus each instance's activity times its compute share of
the rest up to TDP (simulate_extra.mig_power_w), the power the energy counter integrates. A time-sliced GPU is one device: its pods' readings are combined.
DCGM_FI_DEV_VGPU_LICENSE_STATUS is never reported (bare metal: see simulate_extra). Topology
(``topology()``) comes from the fleet's layouts (``Fleet.topology``), unknown for a fleet without them.
"""

from __future__ import annotations

import math
import zlib
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace

from gpuwatch import fields
from gpuwatch.fleet import DRIVER, GPU_SPECS, Fleet, build_fleet, readings_at
from gpuwatch.model import Allocation, Device, Pod
from gpuwatch.sources import DeviceReading, ProcessReading, Snapshot, SourceOptions, simulate_extra
from gpuwatch.sources.kubelet import split_device_id
from gpuwatch.sources.kubelet_simulated import allocatable_from_fleet, pods_from_fleet
from gpuwatch.sources.node_topology import NodeTopology, both_directions, unknown
from gpuwatch.units import MIB

DAY = 86400.0
# The fleet's ratio signals -> the DCGM profiling fields that carry them (from the field table)
PROF_FIELDS = {f.column: f.id for f in fields.FIELDS if f.profiling and f.unit == "ratio"}
# The other fields written here; the rest are simulate_extra.PRODUCERS
FI_GPU_UTIL, FI_FB_TOTAL, FI_FB_FREE, FI_FB_USED, FI_POWER, FI_GPU_TEMP, FI_NVLINK_TX, FI_NVLINK_RX = _OWN_FIELD_IDS = (
    tuple(fields.fid(f"DCGM_FI_{n}") for n in ("DEV_GPU_UTIL", "DEV_FB_TOTAL", "DEV_FB_FREE", "DEV_FB_USED",
                                                "DEV_POWER_USAGE", "DEV_GPU_TEMP", "PROF_NVLINK_TX_BYTES",
                                                "PROF_NVLINK_RX_BYTES")))
# Every DCGM field id this source reports on some device
PROVIDED_FIELD_IDS: frozenset[int] = frozenset((*_OWN_FIELD_IDS, *PROF_FIELDS.values(), *simulate_extra.PRODUCERS))
DRIVER_VERSION, CUDA_DRIVER_VERSION = DRIVER  # what the simulated nodes run unless the fleet says otherwise


def probe(options: SourceOptions) -> str | None:
    return None  # always usable, but never chosen by --source auto (not in AUTO_ORDER)


def open_source(options: SourceOptions, *, now: float | None = None) -> SimulatedSource:
    """Build the fleet (``--simulate-gpus/--simulate-seed``) around ``now`` and pick its node(s)."""
    import time

    start = options.simulate_start
    if start is None:
        start = window_start(time.time() if now is None else now)
    fleet = build_fleet(gpus=options.simulate_gpus, seed=options.simulate_seed, start=start,
                        days=options.simulate_days, topology=True)  # its nodes' GPU layouts, as `simulate` writes
    return SimulatedSource(fleet, node=None if options.simulate_node == "all" else options.simulate_node)


def window_start(now: float) -> float:
    """Midnight UTC three days before ``now``: a 7-day window then has "now" inside it."""
    return math.floor(now / DAY) * DAY - 3 * DAY


class SimulatedSource:
    name = "simulate"

    def __init__(self, fleet: Fleet, *, node: str | None = None):
        if node is not None and node not in fleet.nodes():
            raise ValueError(f"--simulate-node {node!r} is not in the simulated fleet; nodes: {', '.join(fleet.nodes())}")
        self.fleet, self.node = fleet, node
        self.devices = [d for d in fleet.devices if node is None or d.node == node]
        self.meter = simulate_extra.Meter(fleet, {d.gpu_uuid for d in self.devices})

    def fleet_time(self, now: float) -> float:
        """``now`` mapped into the fleet's window (wrapping around past its end)."""
        span = self.fleet.end - self.fleet.start
        return self.fleet.start + (now - self.fleet.start) % span

    def read(self, now: float) -> Snapshot:
        readings = readings_at(self.fleet, self.fleet_time(now), node=self.node)
        return parse(readings, devices=self.devices, counters=self.meter.at(now))

    def allocations(self, now: float) -> list[Allocation]:
        return allocations_at(self.fleet, self.fleet_time(now), node=self.node)

    def topology(self) -> NodeTopology:
        """The served node(s)' GPU topology from the fleet's layouts (static)."""
        return fleet_topology(self.fleet, self.devices)

    def close(self) -> None:
        pass


def parse(readings: list[tuple[Device, Pod | None, dict[str, float]]], *, devices: list[Device],
          counters: Mapping[str, simulate_extra.Counters]) -> Snapshot:
    """fleet.readings_at output (base units) and each GPU's counters at the same instant -> a
    Snapshot in DCGM units, one reading per device."""
    by_device: dict[str, list[tuple[Pod | None, dict[str, float]]]] = defaultdict(list)
    for device, pod, values in readings:
        by_device[device.key].append((pod, values))
    activity = _gpu_activity(readings)
    combined = {d.key: _combine(d, by_device.get(d.key, [])) for d in devices}
    mig_power = _mig_power(devices, combined)
    out = []
    for device in devices:
        occupants = by_device.get(device.key, [])
        values = _dcgm_values(device, combined[device.key])
        if device.gpu_uuid in mig_power:  # board power, on every instance as DCGM serves it
            values[FI_POWER] = mig_power[device.gpu_uuid]
        if device.gpu_uuid in activity:
            a = activity[device.gpu_uuid]
            extra = simulate_extra.Reading(device, combined[device.key], tuple(occupants), a, _temperature(a),
                                           counters[device.gpu_uuid])
            values |= {FI_GPU_TEMP: extra.temp_c} | simulate_extra.derived(extra)
        out.append(DeviceReading(device=_versioned(device), values=values, processes=_processes(occupants)))
    # one snapshot-wide pair (the DCGM driver label): where the nodes served disagree, none is made up
    versions = {(r.device.driver_version, r.device.cuda_driver_version) for r in out}
    driver, cuda = versions.pop() if len(versions) == 1 else (None, None)
    return Snapshot(source="simulate", readings=tuple(out), driver_version=driver, cuda_driver_version=cuda)


def _versioned(device: Device) -> Device:
    """The device with its node's driver and CUDA versions: the fleet's where it sets a driver, else ours."""
    if device.driver_version:
        return device
    return replace(device, driver_version=DRIVER_VERSION, cuda_driver_version=CUDA_DRIVER_VERSION)


def allocations_at(fleet: Fleet, t: float, *, node: str | None = None) -> list[Allocation]:
    """What the kubelet would report at ``t`` (kubelet_simulated.pods_from_fleet, parsed as
    kubelet.parse does) without the gRPC round trip: for golden files and backfill."""

    out = []
    for pod in pods_from_fleet(fleet, node=node, t=t):
        for container in pod["containers"]:
            for devices in container["devices"]:
                for raw in devices["device_ids"]:
                    device_id, vgpu = split_device_id(raw)
                    out.append(Allocation(namespace=pod["namespace"], pod=pod["name"], container=container["name"],
                                          resource=devices["resource_name"], device_id=device_id, vgpu=vgpu))
    return out


def allocatable_at(fleet: Fleet, *, node: str | None = None) -> dict[str, dict[str, tuple[int, ...]]]:
    """What the kubelet's GetAllocatableResources would report (kubelet_simulated.allocatable_from_fleet,
    read as kubelet.parse_allocatable_devices does) without the gRPC round trip."""
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for devices in allocatable_from_fleet(fleet, node=node)["devices"]:
        numa = tuple(sorted({n["ID"] for n in devices.get("topology", {}).get("nodes", ())}))
        for device_id in devices["device_ids"]:
            out.setdefault(devices["resource_name"], {})[device_id] = numa
    return out


def fleet_topology(fleet: Fleet, devices: list[Device]) -> NodeTopology:
    """The topology of ``devices``' GPUs from ``Fleet.topology`` rows (one per unordered pair; served
    in both directions) and each device's NUMA node and NVLink clique. A fleet built without layouts
    has no rows: the topology is then unknown, never made up."""
    gpus = {d.gpu_uuid: d.gpu_index for d in devices}
    numa = {d.gpu_uuid: d.numa_node for d in devices}
    fabric = {d.gpu_uuid: (*d.nvlink_clique.rsplit("/", 1), "completed") for d in devices
              if d.nvlink_clique and "/" in d.nvlink_clique}
    pairs = [(r["gpu_uuid"], r["peer_gpu_uuid"], r["link"], _count(r.get("nvlinks"))) for r in fleet.topology
             if r["gpu_uuid"] in gpus and r["peer_gpu_uuid"] in gpus]
    if not pairs and len(gpus) > 1:
        return unknown("topology unknown: the simulated fleet has no GPU layouts", gpus=gpus, numa=numa, fabric=fabric)
    return NodeTopology(gpus=gpus, links=both_directions(pairs), numa=numa, fabric=fabric)


def _count(value) -> int | None:
    """A topology row's nvlinks (None, NaN or "" = not NVLink / unknown)."""
    if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
        return None
    return int(value)


def _combine(device: Device, occupants: list) -> dict[str, float]:
    """One device's base-unit values; a time-sliced GPU sums its pods (utilisation capped at 1)."""
    if len(occupants) == 1:
        return occupants[0][1]
    if not occupants:
        return {}
    spec = GPU_SPECS[device.gpu_model]
    values = [v for _, v in occupants]
    util = sum(v["gpu_util"] for v in values)
    power = spec["idle_w"] + sum(v["power_watts"] - spec["idle_w"] for v in values)
    return {"gpu_util": min(1.0, util), "fb_used_bytes": sum(v["fb_used_bytes"] for v in values),
            "power_watts": min(spec["tdp_w"], power)}


def _dcgm_values(device: Device, v: dict[str, float]) -> dict[int, float]:
    out: dict[int, float] = {}
    total_mib = device.fb_total_bytes // MIB
    out[FI_FB_TOTAL] = total_mib
    if _ok(v.get("fb_used_bytes")):
        out[FI_FB_USED] = int(v["fb_used_bytes"] // MIB)
        out[FI_FB_FREE] = total_mib - out[FI_FB_USED]
    if _ok(v.get("gpu_util")):
        out[FI_GPU_UTIL] = round(v["gpu_util"] * 100)
    if _ok(v.get("power_watts")):
        out[FI_POWER] = v["power_watts"]
    for name, fid in PROF_FIELDS.items():
        if _ok(v.get(name)):
            out[fid] = v[name]
    if not device.is_mig:  # NVLink counters are GPU-wide (FE_GPU)
        for name, fid in (("nvlink_tx_bytes_per_second", FI_NVLINK_TX), ("nvlink_rx_bytes_per_second", FI_NVLINK_RX)):
            if _ok(v.get(name)):
                out[fid] = int(v[name])
    return out


def _mig_power(devices: list[Device], combined: Mapping[str, dict]) -> dict[str, float]:
    """Each MIG GPU's board power (simulate_extra.mig_power_w), by GPU UUID."""
    instances: dict[str, list] = defaultdict(list)
    for d in devices:
        if d.is_mig:
            instances[d.gpu_uuid].append((d, combined[d.key]))
    return {uuid: simulate_extra.mig_power_w(found) for uuid, found in instances.items()}


def _gpu_activity(readings: list) -> dict[str, float]:
    """Per physical GPU, its busiest occupant's activity: what its GPU-wide fields follow."""
    activity: dict[str, float] = defaultdict(float)
    for device, _pod, v in readings:
        a = next((v[k] for k in ("sm_active", "gpu_util", "gr_engine_active") if _ok(v.get(k))), 0.0)
        activity[device.gpu_uuid] = max(activity[device.gpu_uuid], a)
    return dict(activity)


def _temperature(activity: float) -> int:
    """Synthetic GPU °C (GPU-wide, like DCGM's field)."""
    return round(32 + 45 * min(activity, 1.0))


def _processes(occupants: list) -> tuple[ProcessReading, ...]:
    if len(occupants) < 2:
        return ()
    out = []
    for pod, v in occupants:
        if pod is None:
            continue
        values = {FI_GPU_UTIL: round(v["gpu_util"] * 100), FI_FB_USED: int(v["fb_used_bytes"] // MIB)}
        pid = 1000 + zlib.crc32(pod.pod_uid.encode()) % 4_000_000  # stable fake pid
        out.append(ProcessReading(pid=pid, values=values, namespace=pod.namespace, pod=pod.pod))
    return tuple(out)


def _ok(x: float | None) -> bool:
    return x is not None and not math.isnan(x)
