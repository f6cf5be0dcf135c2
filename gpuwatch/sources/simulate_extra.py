"""The ``simulate`` source's fields the synthetic fleet does not model (clocks, memory temperature,
energy, PCIe traffic and replays, XIDs, remapped rows, encoder/decoder and memory-copy utilisation,
FB reserved, NVLink throughput): one producer per field in ``PRODUCERS``, each from the fleet's own
readings, the model's facts in ``GPU_SPECS`` and ``unit_hash`` of the GPU's UUID, never from the
fleet's random draws, so what the fleet already reports is unchanged. Gauges follow fleet time (they
repeat when its clock wraps); counters follow wall-clock time and never decrease.
DCGM_FI_DEV_VGPU_LICENSE_STATUS is not reported (``ABSENT_ON_BARE_METAL``): no vGPU licence applies
on bare metal; dcgm-exporter renders 0 there (NVIDIA's A100 doc scrape), gpuwatch leaves it absent.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from gpuwatch import fields, mig
from gpuwatch.fleet import GPU_SPECS, MIG_PROFILES, TEAMS, Fleet, signals
from gpuwatch.model import Device, Pod

(FI_SM_CLOCK, FI_MEM_CLOCK, FI_MEMORY_TEMP, FI_ENERGY, FI_PCIE_REPLAY, FI_MEM_COPY_UTIL, FI_ENC_UTIL,
 FI_DEC_UTIL, FI_XID, FI_FB_RESERVED, FI_NVLINK_TOTAL, FI_ROWS_UNCORRECTABLE, FI_ROWS_CORRECTABLE,
 FI_ROW_REMAP_FAILURE, FI_PCIE_TX, FI_PCIE_RX, FI_VGPU_LICENSE) = (fields.fid(f"DCGM_FI_{n}") for n in (
    "DEV_SM_CLOCK", "DEV_MEM_CLOCK", "DEV_MEMORY_TEMP", "DEV_TOTAL_ENERGY_CONSUMPTION",
    "DEV_PCIE_REPLAY_COUNTER", "DEV_MEM_COPY_UTIL", "DEV_ENC_UTIL", "DEV_DEC_UTIL", "DEV_XID_ERRORS",
    "DEV_FB_RESERVED", "DEV_NVLINK_BANDWIDTH_TOTAL", "DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DEV_CORRECTABLE_REMAPPED_ROWS", "DEV_ROW_REMAP_FAILURE", "PROF_PCIE_TX_BYTES", "PROF_PCIE_RX_BYTES",
    "DEV_VGPU_LICENSE_STATUS"))
ABSENT_ON_BARE_METAL: frozenset[int] = frozenset({FI_VGPU_LICENSE})
APP_XIDS = (13, 31, 43, 74)  # graphics engine exception, MMU fault, channel stopped, NVLink error
ENERGY_STEP_S = 300.0  # the grid power is sampled on for the energy counter


@dataclass(frozen=True)
class Faults:
    """One GPU's synthetic hardware history, fixed by its UUID; most GPUs have none."""

    uptime_s: float  # booted this long before the fleet's window starts
    replays: int  # PCIe replays before the window
    replay_every_s: float  # one more replay this often (inf: none)
    xid: int  # the XID it raises once per pass of the window (0: none)
    xid_at: float  # when, as a fraction of the window
    rows: tuple[int, int]  # remapped rows (correctable, uncorrectable) before the window
    remaps: int  # the counter each XID adds a row to: 0 correctable, 1 uncorrectable, -1 none
    remap_failed: int


def faults_of(uuid: str) -> Faults:
    """A few GPUs remap rows (XID 63: recorded; 94: contained ECC error; 64: out of spare rows) or
    raise an application/NVLink XID; 8% see PCIe replays. Rates are illustrative, not measured."""

    def u(salt: str) -> float:
        return unit_hash(f"{uuid}/{salt}")

    kind, replaying = u("fault"), u("pcie") < 0.08
    rows, remaps, failed, xid = (0, 0), -1, 0, 0
    if kind < 0.03:
        rows, remaps, xid = (1 + int(4 * u("rows")), 0), 0, 63
    elif kind < 0.045:
        rows, remaps, xid = (2 + int(4 * u("rows")), 1), 1, 94
    elif kind < 0.05:
        rows, failed, xid = (8, 3), 1, 64
    elif kind < 0.10:
        xid = APP_XIDS[int(len(APP_XIDS) * u("xid"))]
    return Faults(uptime_s=86400 * (2 + 40 * u("boot")), replays=int(20 * u("replays")) if replaying else 0,
                  replay_every_s=3600 * (12 + 60 * u("replay-every")) if replaying else math.inf,
                  xid=xid, xid_at=u("xid-at"), rows=rows, remaps=remaps, remap_failed=failed)


@dataclass(frozen=True)
class Counters:
    """A GPU's counters at one instant (never decreasing in wall-clock time), and its last XID."""

    energy_mj: int
    pcie_replays: int
    rows_correctable: int
    rows_uncorrectable: int
    remap_failed: int
    xid: int


class Meter:
    """Wall-clock counters of the GPUs of ``fleet`` whose UUID is in ``gpus``. Energy: the GPU's power
    on a fixed 5-minute grid over the window (the fleet's power_watts; time-sliced: idle plus each
    pod's power above idle, capped at TDP; MIG, whose power the fleet leaves unknown: idle plus each
    instance's activity x its compute share of TDP - idle), integrated linearly inside a cell, so a
    whole cell adds exactly its grid power x 300 s. Each pass of the window (the clock wraps) adds
    the window's total; boot to the window's start is charged at its mean power. Built on first read.
    """

    def __init__(self, fleet: Fleet, gpus: Iterable[str]):
        self.fleet = fleet
        self.faults = {uuid: faults_of(uuid) for uuid in gpus}
        self._cumulative_mj: dict[str, np.ndarray] | None = None

    def at(self, now: float) -> dict[str, Counters]:
        """Every GPU's counters at wall-clock ``now``."""
        span = self.fleet.end - self.fleet.start
        passes = math.floor((now - self.fleet.start) / span)
        into = now - self.fleet.start - passes * span
        cell = min(int(into // ENERGY_STEP_S), math.ceil(span / ENERGY_STEP_S) - 1)
        frac = min(1.0, max(0.0, into / ENERGY_STEP_S - cell))
        out = {}
        for uuid, cum in self._table().items():
            f, window = self.faults[uuid], int(cum[-1])
            energy = int(window * f.uptime_s / span) + passes * window + int(cum[cell])
            energy += int((cum[cell + 1] - cum[cell]) * frac)
            events = max(0, passes + (into / span >= f.xid_at)) if f.remaps >= 0 else 0
            rows = (f.rows[0] + events * (f.remaps == 0), f.rows[1] + events * (f.remaps == 1))
            replays = f.replays + math.floor(max(0.0, now - self.fleet.start + f.uptime_s) / f.replay_every_s)
            out[uuid] = Counters(max(0, energy), replays, *rows, f.remap_failed,
                                 f.xid if f.xid and into / span >= f.xid_at else 0)
        return out

    def _table(self) -> dict[str, np.ndarray]:  # per GPU, the energy at each grid point of the window
        if self._cumulative_mj is None:
            self._cumulative_mj = {uuid: np.concatenate(([0], np.cumsum(np.round(w * ENERGY_STEP_S * 1000))))
                                   .astype(np.int64) for uuid, w in self._grid_watts().items()}
        return self._cumulative_mj

    def _grid_watts(self) -> dict[str, np.ndarray]:
        fleet = self.fleet
        ts = np.arange(fleet.start, fleet.end, ENERGY_STEP_S)
        above_idle = {uuid: np.zeros(len(ts)) for uuid in self.faults}
        for segment in fleet.segments:  # an unallocated device draws idle power: nothing to add
            device = fleet.devices[segment.device]
            lo, hi = np.searchsorted(ts, [segment.start, segment.end])
            if device.gpu_uuid in above_idle and hi > lo and segment.kind != "idle":
                above_idle[device.gpu_uuid][lo:hi] += _above_idle_w(device, signals(fleet, segment, ts[lo:hi]))
        specs = {d.gpu_uuid: GPU_SPECS[d.gpu_model] for d in fleet.devices if d.gpu_uuid in above_idle}
        return {uuid: specs[uuid]["idle_w"] + np.clip(w, 0.0, specs[uuid]["tdp_w"] - specs[uuid]["idle_w"])
                for uuid, w in above_idle.items()}


def _above_idle_w(device: Device, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    spec = GPU_SPECS[device.gpu_model]
    if not device.is_mig:
        return cols["power_watts"] - spec["idle_w"]
    sm = cols["sm_active"]
    activity = np.nan_to_num(np.where(np.isnan(sm), cols["gr_engine_active"], sm))
    share = MIG_PROFILES[device.mig_profile_id][1] / mig.COMPUTE_SLICES
    return (spec["tdp_w"] - spec["idle_w"]) * np.minimum(activity, 1.0) * share


def mig_power_w(instances: Sequence[tuple[Device, Mapping[str, float]]]) -> float:
    """A MIG GPU's board power now, from its instances' base-unit values: idle plus each instance's
    activity (SM, else graphics engine; unknown = 0) x its compute share of TDP - idle, capped at TDP,
    as the energy counter integrates it (Meter). DCGM reads power for the board (DCGM_FE_GPU)."""
    spec = GPU_SPECS[instances[0][0].gpu_model]
    above = 0.0
    for device, values in instances:
        sm, gr = values.get("sm_active"), values.get("gr_engine_active")
        activity = sm if _ok(sm) else gr if _ok(gr) else 0.0
        above += (spec["tdp_w"] - spec["idle_w"]) * min(activity, 1.0) * MIG_PROFILES[device.mig_profile_id][1] \
            / mig.COMPUTE_SLICES
    return round(spec["idle_w"] + min(above, spec["tdp_w"] - spec["idle_w"]), 3)  # DCGM reads milliwatts


@dataclass(frozen=True)
class Reading:
    """One device at one read: what its derived fields are computed from."""

    device: Device
    values: Mapping[str, float]  # the device's base-unit values (time-sliced: its occupants combined)
    occupants: tuple[tuple[Pod | None, Mapping[str, float]], ...]
    activity: float  # the GPU's busiest occupant's activity, as its temperature uses
    temp_c: int  # the GPU's temperature
    counters: Counters


def derived(reading: Reading) -> dict[int, int]:
    """The derived fields of one device (DCGM id -> value in DCGM units); absent where None."""
    return {fid: value for fid, produce in PRODUCERS.items() if (value := produce(reading)) is not None}


def clock_mhz(idle_max: tuple[int, int], activity: float) -> int:
    """Idle clock when idle, the max boost clock from a 5% duty cycle on, in 15 MHz steps."""
    idle, top = idle_max
    ramp = min(1.0, activity / 0.05)
    return min(top, max(idle, 15 * round((idle + (top - idle) * ramp) / 15)))


def memory_temp(r: Reading) -> int | None:
    """HBM temperature on the line through the model's two captured (die, HBM) points."""
    points = GPU_SPECS[r.device.gpu_model].get("hbm_temp_c")
    if points is None:  # no memory sensor (GDDR boards report N/A)
        return None
    (d0, m0), (d1, m1) = points
    return round(m0 + (r.temp_c - d0) * (m1 - m0) / (d1 - d0))


def mem_copy_util(r: Reading) -> int | None:
    """% of time device memory is read or written: DRAM activity, or 30% of GPU utilisation where
    there is none (time-sliced GPUs, nodes without profiling). Not reported on MIG, as in NVML."""
    dram, util = r.values.get("dram_active"), r.values.get("gpu_util")
    if r.device.is_mig or not (_ok(dram) or _ok(util)):
        return None
    return round(100 * min(dram, 1.0)) if _ok(dram) else round(30 * util)


def video_util(r: Reading, *, encode: bool) -> int | None:
    """The vision team's serving pods decode video streams at 80% of their GPU utilisation; one in
    three also re-encodes at 50%. Everything else uses neither engine. Not reported on MIG."""
    if r.device.is_mig:
        return None
    load = 0.0
    for pod, v in r.occupants:
        if pod is not None and pod.namespace in TEAMS["vision"] and pod.owner_kind in ("Deployment", "StatefulSet"):
            reencodes = unit_hash(f"{pod.pod_uid}/nvenc") < 1 / 3
            load += v["gpu_util"] * (0.5 * reencodes if encode else 0.8)
    return round(100 * min(load, 1.0))


def pcie_bytes(r: Reading, *, floor: float, per_dram: float) -> int | None:
    """Driver chatter plus streaming with DRAM activity, scaled per GPU; where DRAM activity is known."""
    dram = r.values.get("dram_active")
    if r.device.is_mig or not _ok(dram):
        return None
    scale = 0.5 + unit_hash(f"{r.device.gpu_uuid}/pcie-scale")
    return int(floor + per_dram * dram * scale)


def nvlink_total_mb(r: Reading) -> int | None:
    """NVLink tx + rx of the GPU's occupants in MB/s; GPU-wide, so not on MIG instances."""
    links = [v["nvlink_tx_bytes_per_second"] + v["nvlink_rx_bytes_per_second"] for _, v in r.occupants]
    links = [both for both in links if _ok(both)]
    return None if r.device.is_mig or not links else round(sum(links) / 1e6)


# field id -> how it is derived (None: absent on this device). GPU-wide fields repeat on every MIG
# instance of a GPU, as dcgm-exporter serves them there.
PRODUCERS: dict[int, Callable[[Reading], int | None]] = {
    FI_SM_CLOCK: lambda r: clock_mhz(GPU_SPECS[r.device.gpu_model]["sm_clock_mhz"], r.activity),
    FI_MEM_CLOCK: lambda r: clock_mhz(GPU_SPECS[r.device.gpu_model]["mem_clock_mhz"], r.activity),
    FI_MEMORY_TEMP: memory_temp,
    FI_ENERGY: lambda r: r.counters.energy_mj,
    FI_PCIE_REPLAY: lambda r: r.counters.pcie_replays,
    FI_XID: lambda r: r.counters.xid,
    FI_ROWS_CORRECTABLE: lambda r: r.counters.rows_correctable,
    FI_ROWS_UNCORRECTABLE: lambda r: r.counters.rows_uncorrectable,
    FI_ROW_REMAP_FAILURE: lambda r: r.counters.remap_failed,
    # 0: the fleet's FB_FREE is TOTAL - USED, and TOTAL = USED + FREE + RESERVED must hold (ingest rebuilds
    # capacity from it); the real reserve (H100 479 MiB, A100 763 MiB) needs FB_FREE lowered as much
    FI_FB_RESERVED: lambda r: 0,
    FI_MEM_COPY_UTIL: mem_copy_util,
    FI_ENC_UTIL: lambda r: video_util(r, encode=True),
    FI_DEC_UTIL: lambda r: video_util(r, encode=False),
    FI_PCIE_TX: lambda r: pcie_bytes(r, floor=150_000, per_dram=4e7),
    FI_PCIE_RX: lambda r: pcie_bytes(r, floor=20_000, per_dram=1.2e8),
    FI_NVLINK_TOTAL: nvlink_total_mb,
}


def unit_hash(key: str) -> float:
    """Uniform in [0, 1), stable for ``key`` (independent across keys, unlike CRC32 of salted keys)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") / 2**64


def _ok(x: float | None) -> bool:
    return x is not None and not math.isnan(x)
