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
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from gpuwatch.sources import Snapshot, SourceOptions
from gpuwatch.sources.nvml_parse import GPM_METRICS, mig_profile_name, parse

__all__ = ["NvmlSource", "ReadState", "mig_identities", "mig_profile_name", "open_source", "parse", "probe", "read"]
GPU_IS_LOST = 15  # NVML_ERROR_GPU_IS_LOST


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
        return parse(read(self.nvml, self.state, profiling=self.profiling), node=self.node)

    def close(self) -> None:
        for sample in self.state.gpm.values():
            _quiet(self.nvml.nvmlGpmSampleFree, sample)
        self.state.gpm.clear()
        if self._ready:
            _quiet(self.nvml.nvmlShutdown)
            self._ready = False


# --- read: all I/O ----------------------------------------------------------------------------

def read(nvml, state: ReadState, *, profiling: bool = True) -> dict:
    """One pass over every GPU: a JSON-able dict (see tests/fixtures/nvml/*.json)."""
    gpus = []
    _drain_xid_events(nvml, state)
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            gpus.append(_read_gpu(nvml, state, index, profiling=profiling))
        except nvml.NVMLError as exc:
            lost = getattr(exc, "value", None) == GPU_IS_LOST
            gpus.append({"index": index, "uuid": state.uuids.get(index), "lost": lost, "error": str(exc)})
    return {"driver_version": _text(_quiet(nvml.nvmlSystemGetDriverVersion)), "gpus": gpus}


def _read_gpu(nvml, state: ReadState, index: int, *, profiling: bool) -> dict:
    h = nvml.nvmlDeviceGetHandleByIndex(index)
    uuid = _text(nvml.nvmlDeviceGetUUID(h))
    state.uuids[index] = uuid
    _register_xid(nvml, state, h)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    util = _optional(nvml, nvml.nvmlDeviceGetUtilizationRates, h)
    gpu = {"index": index, "uuid": uuid, "name": _text(nvml.nvmlDeviceGetName(h)),
           "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(h).busId),
           "memory": {"total": mem.total, "used": mem.used, "free": mem.free},
           "utilization": None if util is None else {"gpu": util.gpu, "memory": util.memory},
           "power_mw": _optional(nvml, nvml.nvmlDeviceGetPowerUsage, h),
           "temperature_c": _optional(nvml, nvml.nvmlDeviceGetTemperature, h, nvml.NVML_TEMPERATURE_GPU),
           "sm_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_SM),
           "mem_clock_mhz": _optional(nvml, nvml.nvmlDeviceGetClockInfo, h, nvml.NVML_CLOCK_MEM),
           "energy_mj": _optional(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, h),
           "xid": state.xid.get(uuid, 0 if state.events else None),
           "mig": _read_mig(nvml, state, h, index, profiling=profiling)}
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
        mem = nvml.nvmlDeviceGetMemoryInfo(mig)
        out.append({"gi_id": gi_id, "uuid": _text(nvml.nvmlDeviceGetUUID(mig)),
                    "profile": mig_profile_name(_text(nvml.nvmlDeviceGetName(mig))), "profile_id": info.profileId,
                    "placement_start": info.placement.start, "placement_size": info.placement.size,
                    "memory": {"total": mem.total, "used": mem.used, "free": mem.free},
                    "gpm": _read_gpm(nvml, state, h, (index, gi_id)) if profiling else None})
    return out


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
    procs = {p.pid: {"pid": p.pid, "used_memory": p.usedGpuMemory, "sm_util": None}
             for p in _optional(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, h) or []}
    for s in _optional(nvml, nvml.nvmlDeviceGetProcessUtilization, h, state.process_ts) or []:
        procs.setdefault(s.pid, {"pid": s.pid, "used_memory": None, "sm_util": None})["sm_util"] = s.smUtil
        state.process_ts = max(state.process_ts, s.timeStamp)
    return sorted(procs.values(), key=lambda p: p["pid"])


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
