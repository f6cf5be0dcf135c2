"""The ``nvml`` source: NVML through nvidia-ml-py (``import pynvml``); every pynvml call in
gpuwatch lives in this module. Read-only: it never changes GPU state (no MIG, clock or reset calls).

``read(nvml, state)`` does the I/O and returns a plain dict (the captured-payload shape of
tests/fixtures/nvml/); ``parse(raw, node=...)`` (in nvml_parse.py, pure) returns a Snapshot in
DCGM units.
On Hopper and newer, GPM supplies the profiling series without DCGM: SM util -> PROF_SM_ACTIVE,
SM occupancy -> PROF_SM_OCCUPANCY, any-tensor util -> PROF_PIPE_TENSOR_ACTIVE, DRAM bandwidth
util -> PROF_DRAM_ACTIVE, graphics util -> PROF_GR_ENGINE_ACTIVE (percent / 100 = ratio), NVLink
and PCIe MiB/s -> PROF_NVLINK_*/PROF_PCIE_* bytes/s. GPM needs two samples, so profiling values
appear from the second read on.
The other default dcgm-exporter fields are read as DCGM's cache manager reads them; FB fields come
from memory info v2 (``used`` excludes ``reserved``, as DCGM reads them on R510+; v1 without v2), and
NVLINK_BANDWIDTH_TOTAL is DCGM's rate of the all-link NVLink data counters, so it too appears from
the second read on. An NVMLError other than GPU-lost leaves that one field absent, never 0.

MIG: like dcgm-exporter (DCGM maps GPU-level fields watched on a GPU instance to its parent GPU),
GPU-level fields (clocks, temperatures, power, energy, XID, PCIe replays, encoder/decoder util,
remapped rows, NVLink bandwidth, vGPU license, clock event reasons, ECC totals) are read once per GPU
and repeated on each instance; FB fields come from the instance's own memory info; GPU_UTIL /
MEM_COPY_UTIL do not exist on MIG, and the GPM PCIe/NVLink rates are served on whole GPUs only.
Compute processes are listed on the GPU handle (on a MIG GPU: every instance's, each with its GPU
and compute instance id) and attached to the reading of the device they run on.

Failure signals (issue 15): clock event reasons as NVML's bitmask, which DCGM serves unchanged as
field 112 (``nvmlDeviceGetCurrentClocksEventReasons``, R535+; the older
``nvmlDeviceGetCurrentClocksThrottleReasons`` where the binding or driver lacks it); double-bit ECC
totals (``nvmlDeviceGetTotalEccErrors``, uncorrected, volatile and aggregate) only while ECC mode is
enabled — a GPU without ECC, or with it off, has no ECC fields, never 0.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from gpuwatch.sources import Snapshot, SourceOptions
from gpuwatch.sources.nvml_parse import GPM_METRICS, PROVIDED_FIELD_IDS, mig_profile_name, parse

__all__ = ["PROVIDED_FIELD_IDS", "NvmlSource", "ReadState", "mig_identities", "mig_profile_name", "open_source",
           "parse", "probe", "read"]
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST
FUNCTION_NOT_FOUND = 13  # NVML_ERROR_FUNCTION_NOT_FOUND: libnvidia-ml older than the binding
# R535 renamed "throttle reasons" to "clocks event reasons"; same bits, same meaning
CLOCK_EVENT_CALLS = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")
NO_INSTANCE = 0xFFFFFFFF  # nvmlProcessInfo_t's gpuInstanceId / computeInstanceId on a GPU without MIG
# NVML_FI_DEV_* ids by number, stable across bindings (older nvidia-ml-py lacks the NVLink names)
MEMORY_TEMP_FI, NVLINK_DATA_TX_FI, NVLINK_DATA_RX_FI = 82, 138, 139
ALL_LINKS = 0xFFFFFFFF  # field-value scopeId meaning every NVLink of the GPU (what DCGM passes)
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by NVML_VALUE_TYPE_*
_REMAPPED_ROWS = ("correctable", "uncorrectable", "pending", "failure")  # nvmlDeviceGetRemappedRows order


def probe(options: SourceOptions) -> str | None:
    try:
        nvml = importlib.import_module("pynvml")
        nvml.nvmlInit()
        nvml.nvmlShutdown()
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, DriverNotLoaded ...
        return f"NVML not usable ({type(exc).__name__}: {exc}); install nvidia-ml-py and the NVIDIA driver"
    return None


def open_source(options: SourceOptions, *, nvml=None) -> NvmlSource:
    """The nvml source (``nvml`` = the pynvml module; tests pass a fake at this boundary).
    NVML is initialised on the first read and again after a failure, so a driver that loads
    after the exporter starts is a ``source_up 0`` for a while, not a crash loop."""
    return NvmlSource(nvml or importlib.import_module("pynvml"), node=options.node, profiling=options.profiling)


@dataclass
class ReadState:
    """What must survive between reads: GPM's previous samples, the XID event set, last UUIDs."""

    gpm: dict = field(default_factory=dict)  # (gpu index, gi id | None) -> previous GPM sample
    events: object = None
    nvlink: dict = field(default_factory=dict)  # gpu index -> previous all-link NVLink counter sample
    xid: dict = field(default_factory=dict)  # gpu uuid -> last XID seen
    uuids: dict = field(default_factory=dict)  # gpu index -> uuid (to name a GPU once it is lost)
    process_ts: int = 0


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml, *, node: str, profiling: bool = True):
        self.nvml, self.node, self.profiling = nvml, node, profiling
        self.state = ReadState()
        self._ready = False

    def read(self, now: float) -> Snapshot:
        if not self._ready:
            self.nvml.nvmlInit()
            self._ready = True
        return parse(read(self.nvml, self.state, profiling=self.profiling, now=now), node=self.node)

    def close(self) -> None:
        for sample in self.state.gpm.values():
            _quiet(self.nvml.nvmlGpmSampleFree, sample)
        self.state.gpm.clear()
        if self._ready:
            _quiet(self.nvml.nvmlShutdown)
            self._ready = False


# --- read: all I/O ----------------------------------------------------------------------------

def read(nvml, state: ReadState, *, profiling: bool = True, now: float | None = None) -> dict:
    """One pass over every GPU: a JSON-able dict (see tests/fixtures/nvml/*.json). ``now`` (epoch
    seconds) stamps NVLink counters that NVML returns without a timestamp."""
    gpus = []
    _drain_xid_events(nvml, state)
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            gpus.append(_read_gpu(nvml, state, index, profiling=profiling, now=now))
        except nvml.NVMLError as exc:
            lost = getattr(exc, "value", None) == GPU_IS_LOST
            gpus.append({"index": index, "uuid": state.uuids.get(index), "lost": lost, "error": str(exc)})
    return {"driver_version": _text(_quiet(nvml.nvmlSystemGetDriverVersion)),
            "cuda_driver_version": _quiet(nvml.nvmlSystemGetCudaDriverVersion_v2),  # NVML's integer: 12040 = 12.4
            "gpus": gpus}


def _read_gpu(nvml, state: ReadState, index: int, *, profiling: bool, now: float | None) -> dict:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    uuid = _text(nvml.nvmlDeviceGetUUID(h))
    state.uuids[index] = uuid
    _register_xid(nvml, state, h)
    util = _optional(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
    gpu = {"index": index, "uuid": uuid, "name": _text(nvml.nvmlDeviceGetName(h)),
           "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(h).busId), "memory": _read_memory(nvml, h),
           "utilization": None if util is None else {"gpu": util.gpu, "memory": util.memory},
           "power_mw": _optional(nvml, nvml.nvmlDeviceGetPowerUsage, h),
           "temperature_c": _optional(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
           "sm_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
           "mem_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
           "energy_mj": _optional(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, h),
           "xid": state.xid.get(uuid, 0 if state.events else None),
           "mig": _read_mig(nvml, state, h, index, profiling=profiling)}
    gpu |= _read_health(nvml, h) | {"nvlink": _read_nvlink(nvml, state, h, index, now=now)}
    if not gpu["mig"]:
        gpu["gpm"] = _read_gpm(nvml, state, h, (index, None)) if profiling else None
    gpu["processes"] = _read_processes(nvml, state, h)
    return gpu


def _read_mig(nvml, state: ReadState, h, index: int, *, profiling: bool) -> list[dict]:
    mode = _optional(nvml, nvml.nvmlDeviceGetMigMode, h)
    if not mode or mode[0] != nvml.NVML_DEVICE_MIG_ENABLE:
        return []
    out, seen = [], set()
    for j in range(nvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        mig = _optional(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
        if mig is None:
            continue
        gi_id = nvml.nvmlDeviceGetGpuInstanceId(mig)
        if gi_id in seen:  # another compute instance of the same GPU instance
            continue
        seen.add(gi_id)
        info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(h, gi_id))
        out.append({"gi_id": gi_id, "uuid": _text(nvml.nvmlDeviceGetUUID(mig)),
                    "profile": mig_profile_name(_text(nvml.nvmlDeviceGetName(mig))), "profile_id": info.profileId,
                    "placement_start": info.placement.start, "placement_size": info.placement.size,
                    "memory": _read_memory(nvml, mig),
                    "gpm": _read_gpm(nvml, state, h, (index, gi_id)) if profiling else None})
    return out


def _read_memory(nvml, h) -> dict:
    """FB bytes as DCGM reads them: memory info v2 (with ``reserved``), v1 where the driver lacks v2."""
    mem = _optional(nvml, nvml.nvmlDeviceGetMemoryInfo, h, nvml.nvmlMemory_v2)
    if mem is None:
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        return {"total": mem.total, "used": mem.used, "free": mem.free}
    return {"total": mem.total, "used": mem.used, "free": mem.free, "reserved": mem.reserved}


def _read_health(nvml, h) -> dict:
    """GPU-level fields of dcgm-exporter's default set beyond the basics (None = not available)."""
    enc = _optional(nvml, nvml.nvmlDeviceGetEncoderUtilization, h)  # [util %, sampling period µs]
    dec = _optional(nvml, nvml.nvmlDeviceGetDecoderUtilization, h)
    rows = _optional(nvml, nvml.nvmlDeviceGetRemappedRows, h)
    temp = _field_values(nvml, h, [MEMORY_TEMP_FI])[0]
    return {"memory_temp_c": None if temp is None else int(temp[0]),
            "pcie_replay": _optional(nvml, nvml.nvmlDeviceGetPcieReplayCounter, h),
            "encoder_util": None if enc is None else enc[0], "decoder_util": None if dec is None else dec[0],
            "remapped_rows": None if rows is None else dict(zip(_REMAPPED_ROWS, rows, strict=True)),
            "grid_licensing": _read_grid_licensing(nvml, h),
            "clocks_event_reasons": _read_clock_events(nvml, h)} | _read_ecc(nvml, h)


def _read_clock_events(nvml, h) -> int | None:
    """The clock event (throttle) reasons bitmask; the older call only where the newer one does not
    exist (not in this nvidia-ml-py, or FUNCTION_NOT_FOUND from an older libnvidia-ml)."""
    for name in CLOCK_EVENT_CALLS:
        if (call := getattr(nvml, name, None)) is None:
            continue
        try:
            return int(call(h))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == GPU_IS_LOST:
                raise
            if getattr(exc, "value", None) != FUNCTION_NOT_FOUND:
                return None
    return None


def _read_ecc(nvml, h) -> dict:
    """Uncorrected (double-bit) ECC error totals: volatile (since driver load) and aggregate (the
    GPU's life). NVML's counters require ECC mode enabled, so the current mode is checked first: off
    or unsupported (GeForce) -> None, never a stale or made-up count."""
    mode = _optional(nvml, nvml.nvmlDeviceGetEccMode, h)  # [current, pending]
    if not mode or mode[0] != nvml.NVML_FEATURE_ENABLED:
        return {"ecc_dbe_volatile": None, "ecc_dbe_aggregate": None}
    total = nvml.nvmlDeviceGetTotalEccErrors
    dbe = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    return {"ecc_dbe_volatile": _optional(nvml, total, h, dbe, nvml.NVML_VOLATILE_ECC),
            "ecc_dbe_aggregate": _optional(nvml, total, h, dbe, nvml.NVML_AGGREGATE_ECC)}


def _read_grid_licensing(nvml, h) -> dict | None:
    """Grid licensing support and [feature code, state] pairs: DCGM's VGPU_LICENSE_STATUS input."""
    if (lic := _optional(nvml, nvml.nvmlDeviceGetGridLicensableFeatures, h)) is None:
        return None
    features = lic.gridLicensableFeatures[: lic.licensableFeaturesCount]
    return {"supported": int(lic.isGridLicenseSupported), "features": [[f.featureCode, f.featureState] for f in features]}


def _read_nvlink(nvml, state: ReadState, h, index: int, *, now: float | None) -> dict | None:
    """This read's and the previous read's all-link NVLink data RX+TX counter (KiB) with NVML's
    timestamps (µs), as DCGM samples them for NVLINK_BANDWIDTH_TOTAL; None where not supported."""
    rx, tx = _field_values(nvml, h, [(NVLINK_DATA_RX_FI, ALL_LINKS), (NVLINK_DATA_TX_FI, ALL_LINKS)])
    if rx is None or tx is None:
        state.nvlink.pop(index, None)
        return None
    stamp = max(rx[1], tx[1]) or (None if now is None else round(now * 1e6))
    sample = {"kib": int(rx[0] + tx[0]), "timestamp_us": stamp}
    previous, state.nvlink[index] = state.nvlink.get(index), sample
    return sample | {"previous": previous}


def _field_values(nvml, h, ids: list) -> list[tuple | None]:
    """nvmlDeviceGetFieldValues: (value, timestamp µs) per id; None where its entry's own nvmlReturn
    (or the whole call) failed."""
    entries = _optional(nvml, nvml.nvmlDeviceGetFieldValues, h, ids) or [None] * len(ids)
    return [(value, e.timestamp) if e is not None and e.nvmlReturn == 0 and (value := _decode(e)) is not None
            else None for e in entries]


def _decode(entry):
    """The union member valueType names. A double whose high word is zero is an integer that r545
    drivers mislabel (memory temperature, nvbug 4300930; DCGM reads uiVal for it)."""
    if entry.valueType == 0 and entry.value.ullVal >> 32 == 0:
        return entry.value.ullVal
    member = _VALUE_MEMBERS[entry.valueType] if 0 <= entry.valueType < len(_VALUE_MEMBERS) else None
    return member and getattr(entry.value, member)


def mig_identities(nvml) -> dict[tuple[str, int], dict]:
    """(GPU uuid, GI id) -> that MIG instance's MIG UUID, profile id and placement (for the dcgm
    source: DCGM's hierarchy has neither the ``MIG-…`` UUID kubelet hands out nor placements)."""
    out = {}
    for index in range(nvml.nvmlDeviceGetCount()):
        h = _optional(nvml, nvml.nvmlDeviceGetHandleByIndex, index)
        if h is None:
            continue
        uuid = _text(nvml.nvmlDeviceGetUUID(h))
        for gi in _read_mig(nvml, ReadState(), h, index, profiling=False):
            out[(uuid, gi["gi_id"])] = gi
    return out


def _read_gpm(nvml, state: ReadState, h, key: tuple) -> dict | None:
    """GPM metrics between the previous sample and now (None before the second read / unsupported)."""
    if key not in state.gpm and not _gpm_supported(nvml, h):
        return None
    sample = nvml.nvmlGpmSampleAlloc()
    if key[1] is None:
        nvml.nvmlGpmSampleGet(h, sample)
    else:
        nvml.nvmlGpmMigSampleGet(h, key[1], sample)
    previous, state.gpm[key] = state.gpm.get(key), sample
    if previous is None:
        return None
    try:
        request = nvml.c_nvmlGpmMetricsGet_t()
        request.version, request.numMetrics = nvml.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRICS)
        request.sample1, request.sample2 = previous, sample
        for i, metric_id in enumerate(GPM_METRICS):
            request.metrics[i].metricId = metric_id
        nvml.nvmlGpmMetricsGet(request)
        return {GPM_METRICS[m.metricId][0]: m.value for m in request.metrics[: len(GPM_METRICS)] if m.nvmlReturn == 0}
    finally:
        nvml.nvmlGpmSampleFree(previous)


def _gpm_supported(nvml, h) -> bool:
    support = _optional(nvml, nvml.nvmlGpmQueryDeviceSupport, h)
    return bool(support and support.isSupportedDevice)


def _read_processes(nvml, state: ReadState, h) -> list[dict]:
    """Compute processes (host PIDs as the driver sees them) with their memory (bytes; None where NVML
    cannot say), MIG GPU / compute instance (None on a whole GPU) and SM utilization samples."""
    procs = {p.pid: {"pid": p.pid, "used_memory": p.usedGpuMemory, "sm_util": None} | _instance_ids(p)
             for p in _optional(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h) or []}
    for s in _optional(nvml, nvml.nvmlDeviceGetProcessUtilization, h, state.process_ts) or []:
        procs.setdefault(s.pid, {"pid": s.pid, "used_memory": None, "sm_util": None} | _instance_ids(s))
        procs[s.pid]["sm_util"] = s.smUtil
        state.process_ts = max(state.process_ts, s.timeStamp)
    return sorted(procs.values(), key=lambda p: p["pid"])


def _instance_ids(process) -> dict:
    gi, ci = (getattr(process, key, NO_INSTANCE) for key in ("gpuInstanceId", "computeInstanceId"))
    return {"gpu_instance_id": None if gi == NO_INSTANCE else gi,
            "compute_instance_id": None if ci == NO_INSTANCE else ci}


def _register_xid(nvml, state: ReadState, h) -> None:
    if state.events is None:
        state.events = _optional(nvml, nvml.nvmlEventSetCreate) or False
    if state.events:
        _quiet(nvml.nvmlDeviceRegisterEvents, h, nvml.nvmlEventTypeXidCriticalError, state.events)


def _drain_xid_events(nvml, state: ReadState) -> None:
    """Non-blocking: remember the latest XID per GPU (DCGM_FI_DEV_XID_ERRORS = last XID)."""
    while state.events:
        event = _optional(nvml, nvml.nvmlEventSetWait_v2, state.events, 0)
        if event is None:
            return
        state.xid[_text(nvml.nvmlDeviceGetUUID(event.device))] = int(event.eventData)


def _optional(nvml, fn, *args):
    """``fn(*args)``, or None where the GPU does not support it; GPU-lost errors propagate."""
    try:
        return fn(*args)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == GPU_IS_LOST:
            raise
        return None


def _quiet(fn, *args):
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value) -> str | None:
    return value.decode() if isinstance(value, bytes) else value
