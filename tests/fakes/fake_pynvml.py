"""FAKE pynvml (nvidia-ml-py) at the NVML boundary, for nvml source tests on machines without a GPU.

``FakeNvml(scenario)`` answers the pynvml functions gpuwatch.sources.nvml calls with the same
signatures and return shapes (memory/utilization objects, ``busId``, MIG device handles, GPU
instance info with ``placement.start/size``, process samples with ``pid/smUtil/timeStamp``, GPM via
the real ``c_nvmlGpmMetricsGet_t`` struct). Constants, structs and the ``NVMLError`` hierarchy are
the real pynvml's, so ``NVMLError(NVML_ERROR_GPU_IS_LOST)`` is the real ``NVMLError_GpuIsLost``.
Scenario values follow nvidia-smi's units (bytes, mW, °C, MHz, %). A GPU with ``"lost": True``
raises GPU_IS_LOST from every call, as NVML does after a GPU falls off the bus.

Optional per-GPU keys (absent = the call raises NVML_ERROR_NOT_SUPPORTED, as on hardware without it):
``memory.reserved`` (bytes; without it memory info v2 raises FUNCTION_NOT_FOUND, like a pre-R510
libnvidia-ml; v1 then reports ``used + reserved``, as NVML does), ``pcie_replay``, ``encoder_util`` /
``decoder_util`` (%), ``remapped_rows`` ({correctable, uncorrectable, pending, failure}),
``grid_licensing`` ({supported, features: [{code, state}]}), ``field_values`` (NVML_FI id -> a number,
or {"nvmlReturn": name} / {union member: number, "valueType": name}; the NVLink throughput ids answer
only for scopeId UINT_MAX = all links, "<id>/<scope>" keys for other scopes) with
``field_timestamp_us``, ``clocks_event_reasons`` (NVML's bitmask; both the R535+ and the older
"throttle" call answer it), ``ecc_mode`` ([current, pending], NVML_FEATURE_*; absent = a GPU without
ECC, as GeForce cards answer) with ``ecc_errors`` ({"uncorrected"|"corrected": {"volatile"|"aggregate":
count}}; nvmlDeviceGetTotalEccErrors raises NOT_SUPPORTED while ECC mode is off: the NVML reference says
the counters require it), and ``errors`` (pynvml function name -> NVML_ERROR_* name it raises;
NVML_ERROR_FUNCTION_NOT_FOUND is what pynvml raises where libnvidia-ml lacks the symbol).
``processes``: [{pid, used_memory (bytes, null = NVML_VALUE_NOT_AVAILABLE), sm_util, gi_id, ci_id (MIG
only)}], answered as nvidia-ml-py's nvmlProcessInfo_v3 objects: gpuInstanceId / computeInstanceId
0xFFFFFFFF on a GPU without MIG; a MIG GPU handle lists every instance's, a MIG device handle its own.
Scenario-wide: ``driver_version`` and ``cuda_driver_version`` (NVML's integer, 13010 = 13.1).
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pynvml as _real

_ALL_LINKS = 0xFFFFFFFF
_NVLINK_THROUGHPUT = range(_real.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, _real.NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX + 1)
# The union member NVML fills for a plain number, by field (memory temperature is an unsigned int)
_VALUE_TYPES = {_real.NVML_FI_DEV_MEMORY_TEMP: ("uiVal", "NVML_VALUE_TYPE_UNSIGNED_INT")}
_UNSUPPORTED = {"nvmlReturn": "NVML_ERROR_NOT_SUPPORTED"}
_NO_INSTANCE = 0xFFFFFFFF
_ECC_KINDS = {_real.NVML_MEMORY_ERROR_TYPE_UNCORRECTED: "uncorrected", _real.NVML_MEMORY_ERROR_TYPE_CORRECTED: "corrected"}
_ECC_COUNTERS = {_real.NVML_VOLATILE_ECC: "volatile", _real.NVML_AGGREGATE_ECC: "aggregate"}


class FakeNvml:
    def __init__(self, scenario: dict):
        self.scenario = scenario
        self.calls: list[str] = []
        self.initialised = 0
        self._samples: dict[int, tuple] = {}  # sample address -> (gpu index, gi id)
        for name in dir(_real):  # constants, structs, error classes
            if name.startswith(("NVML_", "c_nvml", "NVMLError", "nvmlEventType", "struct_", "nvmlMemory_v")):
                setattr(self, name, getattr(_real, name))

    # --- lifecycle / system
    def nvmlInit(self):
        if self.scenario.get("driver_not_loaded"):
            raise _real.NVMLError(_real.NVML_ERROR_DRIVER_NOT_LOADED)
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        return self.scenario.get("driver_version", "590.48.01")

    def nvmlSystemGetCudaDriverVersion_v2(self):
        """NVML's integer (1000 x major + 10 x minor); default 13010, the CUDA 13.1 that driver
        590.48.01 reports in the real captures; ``"cuda_driver_version": null`` = NVML cannot say."""
        version = self.scenario.get("cuda_driver_version", 13010)
        if version is None:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return version

    def nvmlDeviceGetCount(self):
        return len(self.scenario["gpus"])

    # --- devices
    def nvmlDeviceGetHandleByIndex(self, index):
        handle = SimpleNamespace(index=index, gi=None)
        self._gpu(handle)  # a lost GPU fails here already, as in NVML
        return handle

    def nvmlDeviceGetUUID(self, h):
        return self._field(h, "uuid")

    def nvmlDeviceGetName(self, h):
        return self._field(h, "name")

    def nvmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(busId=self._field(h, "pci_bus_id"))

    def nvmlDeviceGetMemoryInfo(self, h, version=None):
        mem = self._field(h, "memory")
        if version is None:  # v1: used includes the reserved memory
            return _real.c_nvmlMemory_t(total=mem["total"], free=mem["free"], used=mem["used"] + mem.get("reserved", 0))
        if "reserved" not in mem:  # pynvml's answer when libnvidia-ml has no nvmlDeviceGetMemoryInfo_v2
            raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
        return _real.c_nvmlMemory_v2_t(version=version, **mem)

    def nvmlDeviceGetUtilizationRates(self, h):
        util = self._field(h, "utilization")
        if util is None or h.gi is not None:  # not supported on MIG
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(**util)

    def nvmlDeviceGetPowerUsage(self, h):
        return self._field(h, "power_mw")

    def nvmlDeviceGetTemperature(self, h, sensor):
        return self._field(h, "temperature_c")

    def nvmlDeviceGetClockInfo(self, h, clock):
        return self._field(h, "sm_clock_mhz" if clock == _real.NVML_CLOCK_SM else "mem_clock_mhz")

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        return self._field(h, "energy_mj")

    def nvmlDeviceGetPcieReplayCounter(self, h):
        return self._checked(h, "nvmlDeviceGetPcieReplayCounter", "pcie_replay")

    def nvmlDeviceGetEncoderUtilization(self, h):
        return [self._checked(h, "nvmlDeviceGetEncoderUtilization", "encoder_util"), 167000]  # [%, period µs]

    def nvmlDeviceGetDecoderUtilization(self, h):
        return [self._checked(h, "nvmlDeviceGetDecoderUtilization", "decoder_util"), 167000]

    def nvmlDeviceGetRemappedRows(self, h):
        rows = self._checked(h, "nvmlDeviceGetRemappedRows", "remapped_rows")
        return (rows["correctable"], rows["uncorrectable"], rows["pending"], rows["failure"])

    def nvmlDeviceGetGridLicensableFeatures(self, h):
        lic = self._checked(h, "nvmlDeviceGetGridLicensableFeatures", "grid_licensing")
        out = _real.c_nvmlGridLicensableFeatures_v4_t(isGridLicenseSupported=lic["supported"],
                                                       licensableFeaturesCount=len(lic["features"]))
        for i, feature in enumerate(lic["features"]):
            out.gridLicensableFeatures[i].featureCode = feature["code"]
            out.gridLicensableFeatures[i].featureState = feature["state"]
        return out

    def nvmlDeviceGetFieldValues(self, h, fieldIds):
        gpu = self._gpu(h)
        self._raise_listed(gpu, "nvmlDeviceGetFieldValues")
        values = (_real.c_nvmlFieldValue_t * len(fieldIds))()
        for i, field_id in enumerate(fieldIds):
            try:  # pynvml accepts an id or an (id, scopeId) pair
                (values[i].fieldId, values[i].scopeId) = field_id
            except TypeError:
                values[i].fieldId = field_id
            self._fill_field_value(gpu, values[i])
        return values

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        return self._checked(h, "nvmlDeviceGetCurrentClocksEventReasons", "clocks_event_reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h):
        return self._checked(h, "nvmlDeviceGetCurrentClocksThrottleReasons", "clocks_event_reasons")

    def nvmlDeviceGetEccMode(self, h):
        return list(self._checked(h, "nvmlDeviceGetEccMode", "ecc_mode"))

    def nvmlDeviceGetTotalEccErrors(self, h, errorType, counterType):
        current, _pending = self.nvmlDeviceGetEccMode(h)
        counts = self._gpu(h).get("ecc_errors", {}).get(_ECC_KINDS[errorType], {})
        self._raise_listed(self._gpu(h), "nvmlDeviceGetTotalEccErrors")
        if current != _real.NVML_FEATURE_ENABLED or _ECC_COUNTERS[counterType] not in counts:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return counts[_ECC_COUNTERS[counterType]]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        self._raise_listed(self._gpu(h), "nvmlDeviceGetComputeRunningProcesses")
        procs = [p for p in self._field(h, "processes", []) if h.gi is None or p.get("gi_id") == h.gi]
        return [_process_info(p) for p in procs]

    def nvmlDeviceGetProcessUtilization(self, h, ts):
        procs = [p for p in self._field(h, "processes", []) if p.get("sm_util") is not None]
        if not procs:
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return [SimpleNamespace(pid=p["pid"], smUtil=p["sm_util"], memUtil=0, timeStamp=ts + 1) for p in procs]

    # --- MIG (read-only calls)
    def nvmlDeviceGetMigMode(self, h):
        return [1, 1] if self._gpu(h).get("mig") else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7 if self._gpu(h).get("mig") else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, j):
        migs = self._gpu(h).get("mig") or []
        if j >= len(migs):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_FOUND)
        return SimpleNamespace(index=h.index, gi=migs[j]["gi_id"])

    def nvmlDeviceGetGpuInstanceId(self, mig):
        return mig.gi

    def nvmlDeviceGetGpuInstanceById(self, h, gi_id):
        return SimpleNamespace(index=h.index, gi=gi_id)

    def nvmlGpuInstanceGetInfo(self, gi):
        mig = self._mig(gi)
        start, size = mig["placement"]
        return SimpleNamespace(id=gi.gi, profileId=mig["profile_id"], placement=SimpleNamespace(start=start, size=size))

    # --- GPM
    def nvmlGpmQueryDeviceSupport(self, h):
        return SimpleNamespace(isSupportedDevice=int(self._gpu(h).get("gpm") is not None))

    def nvmlGpmSampleAlloc(self):
        sample = ctypes.pointer(_real.struct_c_nvmlGpmSample_t())
        self._keep = [*getattr(self, "_keep", []), sample]
        return sample

    def nvmlGpmSampleFree(self, sample):
        self._samples.pop(ctypes.addressof(sample.contents), None)

    def nvmlGpmSampleGet(self, h, sample):
        self._gpu(h)
        self._samples[ctypes.addressof(sample.contents)] = (h.index, None)
        return sample

    def nvmlGpmMigSampleGet(self, h, gi_id, sample):
        self._samples[ctypes.addressof(sample.contents)] = (h.index, gi_id)
        return sample

    def nvmlGpmMetricsGet(self, request):
        index, gi = self._samples[ctypes.addressof(request.sample2.contents)]
        target = self._mig(SimpleNamespace(index=index, gi=gi)) if gi is not None else self.scenario["gpus"][index]
        for m in request.metrics[: request.numMetrics]:
            value = (target.get("gpm") or {}).get(str(m.metricId))
            m.nvmlReturn, m.value = (0, value) if value is not None else (_real.NVML_ERROR_NOT_SUPPORTED, 0.0)
        return request

    # --- XID events
    def nvmlEventSetCreate(self):
        return SimpleNamespace(pending=[(g["uuid"], x) for g in self.scenario["gpus"] for x in g.get("xid_events", [])])

    def nvmlDeviceRegisterEvents(self, h, types, event_set):
        self._gpu(h)

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        if not event_set.pending:
            raise _real.NVMLError(_real.NVML_ERROR_TIMEOUT)
        uuid, xid = event_set.pending.pop(0)
        return SimpleNamespace(device=SimpleNamespace(uuid=uuid), eventData=xid)

    # --- helpers
    def _gpu(self, h) -> dict:
        gpu = self.scenario["gpus"][h.index] if hasattr(h, "index") else self._by_uuid(h.uuid)
        if gpu.get("lost"):
            raise _real.NVMLError(_real.NVML_ERROR_GPU_IS_LOST)
        if gpu.get("error"):
            raise _real.NVMLError(_real.NVML_ERROR_UNKNOWN)
        return gpu

    def _by_uuid(self, uuid):
        return next(g for g in self.scenario["gpus"] if g["uuid"] == uuid)

    def _mig(self, h) -> dict:
        return next(m for m in self._gpu(h)["mig"] if m["gi_id"] == h.gi)

    def _checked(self, h, function: str, name: str):
        self._raise_listed(self._gpu(h), function)
        return self._field(h, name)

    @staticmethod
    def _raise_listed(gpu: dict, function: str) -> None:
        if function in gpu.get("errors", {}):
            raise _real.NVMLError(getattr(_real, gpu["errors"][function]))

    @staticmethod
    def _fill_field_value(gpu: dict, entry) -> None:
        """One c_nvmlFieldValue_t as NVML fills it: its own nvmlReturn, then valueType and union member."""
        fid, scope = entry.fieldId, entry.scopeId
        whole = scope == _ALL_LINKS if fid in _NVLINK_THROUGHPUT else scope == 0
        spec = gpu.get("field_values", {}).get(str(fid) if whole else f"{fid}/{scope}", _UNSUPPORTED)
        spec = spec if isinstance(spec, dict) else _typed(fid, spec)
        entry.timestamp = gpu.get("field_timestamp_us", 0)
        if "nvmlReturn" in spec:
            entry.nvmlReturn = getattr(_real, spec["nvmlReturn"])
            return
        entry.nvmlReturn, entry.valueType = _real.NVML_SUCCESS, getattr(_real, spec["valueType"])
        member = next(key for key in spec if key != "valueType")
        setattr(entry.value, member, spec[member])

    def _field(self, h, name, default=None):
        if not hasattr(h, "index"):  # an event's device
            return self._by_uuid(h.uuid)[name]
        source = self._mig(h) if h.gi is not None and name in ("uuid", "name", "memory") else self._gpu(h)
        value = source.get(name, default)
        if value is None and default is None and name not in ("utilization", "gpm"):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return value


def _process_info(p: dict):
    """One process as nvidia-ml-py returns it: nvmlProcessInfo_v3 as a friendly object, usedGpuMemory
    None where NVML reports NVML_VALUE_NOT_AVAILABLE."""
    info = _real.c_nvmlProcessInfo_v3_t(pid=p["pid"], gpuInstanceId=p.get("gi_id", _NO_INSTANCE),
                                        computeInstanceId=p.get("ci_id", _NO_INSTANCE),
                                        usedGpuMemory=_real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
                                        if p["used_memory"] is None else p["used_memory"])
    obj = _real.nvmlStructToFriendlyObject(info)
    if obj.usedGpuMemory == _real.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
        obj.usedGpuMemory = None
    return obj


def _typed(fid: int, number) -> dict:
    """A plain scenario number as NVML types it: doubles in dVal, memory temperature in uiVal, else ullVal."""
    if isinstance(number, float):
        return {"dVal": number, "valueType": "NVML_VALUE_TYPE_DOUBLE"}
    member, value_type = _VALUE_TYPES.get(fid, ("ullVal", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG"))
    return {member: number, "valueType": value_type}
