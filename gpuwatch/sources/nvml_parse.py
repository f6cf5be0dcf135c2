"""Pure half of the ``nvml`` source: the dict ``nvml.read`` returns -> Snapshot in DCGM units.

No pynvml here (nvml.py holds every pynvml call); fed captured payloads in tests.
"""

from __future__ import annotations

from gpuwatch.fields import fid
from gpuwatch.model import Device
from gpuwatch.sources import DeviceReading, ProcessReading, Snapshot
from gpuwatch.units import MIB

# GPM metric id (pynvml NVML_GPM_METRIC_*) -> (raw key, DCGM field, scale to DCGM units): GPM gives
# percentages where DCGM serves ratios, and MiB/s where DCGM serves bytes/s.
_GPM = {1: ("graphics_util", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01), 2: ("sm_util", "DCGM_FI_PROF_SM_ACTIVE", 0.01),
        3: ("sm_occupancy", "DCGM_FI_PROF_SM_OCCUPANCY", 0.01),
        5: ("any_tensor_util", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.01),
        10: ("dram_bw_util", "DCGM_FI_PROF_DRAM_ACTIVE", 0.01),
        20: ("pcie_tx_mib_s", "DCGM_FI_PROF_PCIE_TX_BYTES", MIB), 21: ("pcie_rx_mib_s", "DCGM_FI_PROF_PCIE_RX_BYTES", MIB),
        61: ("nvlink_tx_mib_s", "DCGM_FI_PROF_NVLINK_TX_BYTES", MIB),
        60: ("nvlink_rx_mib_s", "DCGM_FI_PROF_NVLINK_RX_BYTES", MIB)}
GPM_METRICS = {gpm_id: (key, fid(name), scale) for gpm_id, (key, name, scale) in _GPM.items()}
# GPM rates that are GPU-wide (served on the whole GPU, not on MIG instances), and integers in DCGM
_GPU_WIDE_RATES = frozenset(fid(n) for n in ("DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
                                             "DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES"))

# Fields ``parse`` can produce, each declared once in one of these tables; PROVIDED_FIELD_IDS is their union.
# Payload key -> field for whole-GPU utilization (NVML has none for MIG instances), in %.
_UTILIZATION = {"gpu": fid("DCGM_FI_DEV_GPU_UTIL"), "memory": fid("DCGM_FI_DEV_MEM_COPY_UTIL")}
GPU_UTIL, MEM_COPY_UTIL = _UTILIZATION["gpu"], _UTILIZATION["memory"]
# Memory-info key (bytes) -> field in MiB, floored as DCGM does; "reserved" only from memory info v2.
_MEMORY = {"total": fid("DCGM_FI_DEV_FB_TOTAL"), "free": fid("DCGM_FI_DEV_FB_FREE"),
           "used": fid("DCGM_FI_DEV_FB_USED"), "reserved": fid("DCGM_FI_DEV_FB_RESERVED")}
FB_TOTAL, FB_FREE, FB_USED = _MEMORY["total"], _MEMORY["free"], _MEMORY["used"]
# Payload key -> GPU-level field already in DCGM units (repeated on every MIG instance of the GPU).
_GPU_WIDE = {"sm_clock_mhz": fid("DCGM_FI_DEV_SM_CLOCK"), "mem_clock_mhz": fid("DCGM_FI_DEV_MEM_CLOCK"),
             "temperature_c": fid("DCGM_FI_DEV_GPU_TEMP"), "energy_mj": fid("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
             "xid": fid("DCGM_FI_DEV_XID_ERRORS"), "pcie_replay": fid("DCGM_FI_DEV_PCIE_REPLAY_COUNTER"),
             "encoder_util": fid("DCGM_FI_DEV_ENC_UTIL"), "decoder_util": fid("DCGM_FI_DEV_DEC_UTIL"),
             "clocks_event_reasons": fid("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"),  # NVML's bitmask = DCGM's
             "ecc_dbe_volatile": fid("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
             "ecc_dbe_aggregate": fid("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL")}
# nvmlDeviceGetRemappedRows key -> field (GPU-level).
_REMAPPED_ROWS = {"uncorrectable": fid("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
                  "correctable": fid("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
                  "failure": fid("DCGM_FI_DEV_ROW_REMAP_FAILURE")}
POWER = fid("DCGM_FI_DEV_POWER_USAGE")
VGPU_FEATURE = 1  # NVML_GRID_LICENSE_FEATURE_CODE_VGPU
MAX_MEMORY_TEMP_C = 200  # DCGM discards a larger memory temperature as a bad read


def _power(gpu: dict) -> float | None:
    return None if gpu.get("power_mw") is None else gpu["power_mw"] / 1000.0


def _memory_temp(gpu: dict) -> int | None:
    temp = gpu.get("memory_temp_c")
    return temp if temp is not None and 0 <= temp <= MAX_MEMORY_TEMP_C else None


def _nvlink_rate(gpu: dict) -> int | None:
    """DCGM's NVLINK_BANDWIDTH_TOTAL: the all-link RX+TX data counters' (KiB) rate since the previous
    read, KiB/s / 1000, truncated — DCGM's own arithmetic, served as MB/s. None before the second read
    and across a counter reset."""
    sample = gpu.get("nvlink")
    before = sample and sample.get("previous")
    if not before or sample["timestamp_us"] is None or before["timestamp_us"] is None:
        return None
    seconds, delta = (sample["timestamp_us"] - before["timestamp_us"]) / 1e6, sample["kib"] - before["kib"]
    return int(delta / seconds / 1000) if seconds > 0 and delta >= 0 else None


def _vgpu_license(gpu: dict) -> int | None:
    """DCGM's rule: 0 where the GPU has no grid licensing (bare metal), else 1 if the vGPU feature is
    licensed; None where NVML could not say (call failed) or lists no vGPU feature."""
    lic = gpu.get("grid_licensing")
    if lic is None:
        return None
    if not lic["supported"]:
        return 0
    return next((int(state > 0) for code, state in lic["features"] if code == VGPU_FEATURE), None)


# Field -> how it is derived from the payload (GPU-level, repeated on every MIG instance).
_DERIVED = {POWER: _power, fid("DCGM_FI_DEV_MEMORY_TEMP"): _memory_temp,
            fid("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"): _nvlink_rate,
            fid("DCGM_FI_DEV_VGPU_LICENSE_STATUS"): _vgpu_license}
# Every field id parse can put in a reading's values (when the hardware supports it).
PROVIDED_FIELD_IDS: frozenset[int] = frozenset(
    [*_UTILIZATION.values(), *_MEMORY.values(), *_GPU_WIDE.values(), *_REMAPPED_ROWS.values(), *_DERIVED,
     *(field for _key, field, _scale in GPM_METRICS.values())])


def mig_profile_name(device_name: str) -> str:
    """``NVIDIA H200 MIG 1c.3g.71gb`` -> ``3g.71gb`` (the GPU instance's profile, no CI part)."""
    profile = device_name.rsplit("MIG ", 1)[-1].strip()
    parts = profile.split(".")
    return ".".join(parts[1:]) if len(parts) == 3 and parts[0].endswith("c") else profile


def cuda_version(value) -> str | None:
    """NVML's (and DCGM's) CUDA driver version integer, 1000 x major + 10 x minor (12040), as "12.4";
    None where unknown: absent, not an integer, or out of range (a DCGM blank sentinel)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1_000_000:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def parse(raw: dict, *, node: str) -> Snapshot:
    """The dict ``read`` returns -> Snapshot (DCGM field ids and units), one reading per device."""
    readings, lost, problems = [], [], []
    versions = {"driver_version": raw.get("driver_version"), "cuda_driver_version": cuda_version(
        raw.get("cuda_driver_version"))}
    for gpu in raw["gpus"]:
        if gpu.get("lost") or gpu.get("error"):
            if gpu.get("lost") and gpu.get("uuid"):
                lost.append(gpu["uuid"])
            problems.append(f"GPU {gpu['index']} ({gpu.get('uuid') or 'uuid unknown'}): {gpu.get('error')}")
            continue
        readings.extend(_gpu_readings(gpu, node, versions))
    return Snapshot(source="nvml", readings=tuple(readings), lost=tuple(lost), problems=tuple(problems), **versions)


def _gpu_readings(gpu: dict, node: str, versions: dict) -> list[DeviceReading]:
    parent = Device(node=node, gpu_uuid=gpu["uuid"], gpu_index=gpu["index"], gpu_model=gpu["name"],
                    fb_total_bytes=gpu["memory"]["total"], pci_bus_id=_bus_id(gpu["pci_bus_id"]), **versions)
    shared = _gpu_wide_values(gpu)
    if not gpu.get("mig"):
        values = shared | _memory(gpu["memory"]) | _gpm(gpu.get("gpm"))
        values |= {field: gpu["utilization"][key] for key, field in _UTILIZATION.items() if gpu.get("utilization")}
        return [DeviceReading(parent, values, processes=_processes(gpu.get("processes") or []))]
    out = []
    for gi in gpu["mig"]:  # GPU-level fields repeated on every instance, as dcgm-exporter does
        device = Device(node=node, gpu_uuid=gpu["uuid"], gpu_index=gpu["index"], gpu_model=gpu["name"],
                        fb_total_bytes=gi["memory"]["total"], pci_bus_id=parent.pci_bus_id, mig_gi_id=gi["gi_id"],
                        mig_profile=gi["profile"], mig_profile_id=gi["profile_id"],
                        mig_placement_start=gi["placement_start"], mig_placement_size=gi["placement_size"],
                        mig_uuid=gi["uuid"], **versions)
        values = shared | _memory(gi["memory"]) | _gpm(gi.get("gpm"), mig=True)
        procs = [p for p in gpu.get("processes") or [] if p.get("gpu_instance_id") == gi["gi_id"]]
        out.append(DeviceReading(device, values, processes=_processes(procs)))
    return out


def _gpu_wide_values(gpu: dict) -> dict:
    rows = gpu.get("remapped_rows") or {}
    pairs = {field: gpu.get(key) for key, field in _GPU_WIDE.items()}
    pairs |= {field: rows.get(key) for key, field in _REMAPPED_ROWS.items()}
    pairs |= {field: derive(gpu) for field, derive in _DERIVED.items()}
    return {field: v for field, v in pairs.items() if v is not None}


def _memory(mem: dict) -> dict:
    """Bytes -> MiB (floored, as DCGM does); reserved is absent where the driver has no memory info v2."""
    return {field: mem[key] // MIB for key, field in _MEMORY.items() if mem.get(key) is not None}


def _gpm(gpm: dict | None, *, mig: bool = False) -> dict:
    out = {}
    for key, field, scale in GPM_METRICS.values():
        if gpm and gpm.get(key) is not None and not (mig and field in _GPU_WIDE_RATES):
            out[field] = int(gpm[key] * scale) if field in _GPU_WIDE_RATES else gpm[key] * scale
    return out


def _processes(procs: list[dict]) -> tuple[ProcessReading, ...]:
    out = []
    for p in procs:
        values = {}
        if p.get("sm_util") is not None:
            values[GPU_UTIL] = p["sm_util"]
        if p.get("used_memory") is not None:
            values[FB_USED] = p["used_memory"] // MIB
        out.append(ProcessReading(pid=p["pid"], values=values))
    return tuple(out)


def _bus_id(bus: str) -> str:
    """NVML's ``00000000:18:00.0`` as dcgm-exporter prints it (upper-case hex)."""
    return bus.upper() if bus else ""
