"""FAKE pynvml (nvidia-ml-py) at the NVML boundary, for nvml source tests on machines without a GPU.

``FakeNvml(scenario)`` answers the pynvml functions gpuwatch.sources.nvml calls with the same
signatures and return shapes (memory/utilization objects, ``busId``, MIG device handles, GPU
instance info with ``placement.start/size``, process samples with ``pid/smUtil/timeStamp``, GPM via
the real ``c_nvmlGpmMetricsGet_t`` struct). Constants, structs and the ``NVMLError`` hierarchy are
the real pynvml's, so ``NVMLError(NVML_ERROR_GPU_IS_LOST)`` is the real ``NVMLError_GpuIsLost``.
Scenario values follow nvidia-smi's units (bytes, mW, °C, MHz, %). A GPU with ``"lost": True``
raises GPU_IS_LOST from every call, as NVML does after a GPU falls off the bus.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import pynvml as _real


class FakeNvml:
    def __init__(self, scenario: dict):
        self.scenario = scenario
        self.calls: list[str] = []
        self.initialised = 0
        self._samples: dict[int, tuple] = {}  # sample address -> (gpu index, gi id)
        for name in dir(_real):  # constants, structs, error classes
            if name.startswith(("NVML_", "c_nvml", "NVMLError", "nvmlEventType", "struct_")):
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

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(**self._field(h, "memory"))

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

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return [SimpleNamespace(pid=p["pid"], usedGpuMemory=p["used_memory"]) for p in self._field(h, "processes", [])]

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

    def _field(self, h, name, default=None):
        if not hasattr(h, "index"):  # an event's device
            return self._by_uuid(h.uuid)[name]
        source = self._mig(h) if h.gi is not None and name in ("uuid", "name", "memory") else self._gpu(h)
        value = source.get(name, default)
        if value is None and default is None and name not in ("utilization", "gpm"):
            raise _real.NVMLError(_real.NVML_ERROR_NOT_SUPPORTED)
        return value
