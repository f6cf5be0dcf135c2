"""The ``dcgm`` source: DCGM's own Python bindings (pydcgm / DcgmReader), which ship with DCGM
(not PyPI): ``/usr/share/datacenter-gpu-manager-4/bindings/python3`` (DCGM 4),
``/usr/local/dcgm/bindings/python3`` (DCGM 3), or ``--dcgm-bindings PATH``.

Embedded hostengine by default, or a remote one with ``--dcgm-host``. Like dcgm-exporter's
default ("flex") mode, whole GPUs are read at GPU level and MIG-enabled GPUs at GPU-instance
level (``DCGM_FE_GPU_I`` entities from ``dcgmGetGpuInstanceHierarchy``). Fields are keyed by
numeric id (DCGM 4.6 renamed the constants); ``SourceOptions.extra_field_ids`` (a counters file's
fields) are watched in the same field group. DCGM's blank / not-found / not-supported /
not-permissioned sentinels are dropped in ``parse``, never exported as numbers. DCGM has no MIG
UUID or placement, so those come from NVML (``nvml.mig_identities``) where NVML is usable.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
from types import SimpleNamespace

from gpuwatch import fields
from gpuwatch.model import Device
from gpuwatch.sources import DeviceReading, Snapshot, SourceOptions
from gpuwatch.sources import nvml as nvml_source
from gpuwatch.sources.nvml_parse import cuda_version
from gpuwatch.units import UsageError

log = logging.getLogger(__name__)
BINDINGS_DIRS = ("/usr/share/datacenter-gpu-manager-4/bindings/python3", "/usr/local/dcgm/bindings/python3")
MODULES = ("pydcgm", "DcgmReader", "dcgm_fields", "dcgm_structs", "dcgm_agent")
FE_GPU, FE_GPU_I = 1, 4  # dcgm_fields.DCGM_FE_GPU / DCGM_FE_GPU_I
FI_DRIVER_VERSION, FI_CUDA_VERSION, FI_DEV_NAME, FI_FB_TOTAL = (fields.fid(n) for n in (
    "DCGM_FI_DRIVER_VERSION", "DCGM_FI_CUDA_DRIVER_VERSION", "DCGM_FI_DEV_NAME", "DCGM_FI_DEV_FB_TOTAL"))
# Every field of the table: the series the exporter serves plus driver and CUDA version, GI profile
# name, FB total.
WATCHED_FIELD_IDS = tuple(f.id for f in fields.FIELDS)
# DCGM reads every field of the table where the GPU supports it (README metrics table, per source).
PROVIDED_FIELD_IDS = frozenset(WATCHED_FIELD_IDS)
# dcgmvalue.py sentinels (Python sees int fields as int64): BLANK, +1 NOT_FOUND, +2 NOT_SUPPORTED,
# +3 NOT_PERMISSIONED
INT64_BLANK, FP64_BLANK = 0x7FFFFFFFFFFFFFF0, 140737488355328.0
# Global fields read as the node's, never as a device's value (a lost GPU would still "have" them)
SYSTEM_IDS = frozenset({FI_CUDA_VERSION})
MAX_FIELDS = 128  # dcgm_structs.DCGM_MAX_FIELD_IDS_PER_FIELD_GROUP: one field group holds at most this many


def load_bindings(path: str | None = None) -> SimpleNamespace:
    """Put DCGM's bindings directory on sys.path and import them (ImportError says where it looked)."""
    dirs = [path] if path else list(BINDINGS_DIRS)
    found = next((d for d in dirs if os.path.isdir(d)), None)
    if found and found not in sys.path:
        sys.path.insert(0, found)
    try:
        return SimpleNamespace(**{name: importlib.import_module(name) for name in MODULES})
    except ImportError as exc:
        raise ImportError(f"DCGM Python bindings not importable ({exc}); looked in {', '.join(dirs)}: install "
                          "datacenter-gpu-manager-4-core or pass --dcgm-bindings PATH") from exc


def probe(options: SourceOptions) -> str | None:
    try:
        load_bindings(options.dcgm_bindings)
    except ImportError as exc:
        return str(exc)
    return None


def open_source(options: SourceOptions, *, dcgm: SimpleNamespace | None = None, nvml=None) -> DcgmSource:
    """Load libdcgm; connecting (embedded or ``--dcgm-host``) happens on the first read and again
    after a failure, so a hostengine that is down at start-up is a ``source_up 0``, not a crash loop."""
    dcgm = dcgm or load_bindings(options.dcgm_bindings)
    dcgm.dcgm_structs._dcgmInit()
    return DcgmSource(dcgm, None, options=options, nvml=nvml)


def watched_field_ids(options: SourceOptions) -> list[int]:
    """The table's fields then ``options.extra_field_ids``, each once; profiling (DCP) fields only
    with profiling on. UsageError when DCGM could not watch them all in one field group."""
    wanted = dict.fromkeys((*WATCHED_FIELD_IDS, *(int(f) for f in options.extra_field_ids)))
    ids = [f for f in wanted if options.profiling or not 1000 <= f < 1100]
    if len(ids) > MAX_FIELDS:
        raise UsageError(f"DCGM watches at most {MAX_FIELDS} fields in one field group; gpuwatch's "
                         f"{len(WATCHED_FIELD_IDS)} plus the counters file's make {len(ids)}")
    return ids


def connect(dcgm: SimpleNamespace, host: str | None):
    """``pydcgm.DcgmHandle``: embedded hostengine (host None), ``unix:///path`` or ``host[:port]``."""
    mode = dcgm.dcgm_structs.DCGM_OPERATION_MODE_AUTO
    if not host:
        return dcgm.pydcgm.DcgmHandle(None, opMode=mode)
    if host.startswith("unix://"):
        return dcgm.pydcgm.DcgmHandle(None, unixSocketPath=host[len("unix://"):], opMode=mode)
    return dcgm.pydcgm.DcgmHandle(None, ipAddress=host, opMode=mode)


class DcgmSource:
    name = "dcgm"

    def __init__(self, dcgm: SimpleNamespace, handle, *, options: SourceOptions, nvml=None):
        self.dcgm, self.handle, self.options, self._nvml = dcgm, handle, options, nvml
        self.fields = watched_field_ids(options)
        self._reader, self._entities, self._mig = None, None, {}

    def read(self, now: float) -> Snapshot:
        return parse(self.read_raw(), node=self.options.node)

    def read_raw(self) -> dict:
        """GPU attributes, the MIG hierarchy and the latest entity values, as plain data."""
        if self.handle is None:
            self.handle = connect(self.dcgm, self.options.dcgm_host)
            self._entities = None
        system = self.handle.GetSystem()
        gpus = []
        for gpu_id in system.discovery.GetAllSupportedGpuIds():
            ids = system.discovery.GetGpuAttributes(gpu_id).identifiers
            gpus.append({"gpu_id": gpu_id, "uuid": _text(ids.uuid), "pci_bus_id": _text(ids.pciBusId),
                         "model": _text(ids.deviceName)})
        instances = self._instances()
        entities = tuple((FE_GPU, g["gpu_id"]) for g in gpus if g["gpu_id"] not in {i["gpu_id"] for i in instances})
        entities += tuple((FE_GPU_I, i["entity_id"]) for i in instances)
        if entities != self._entities:  # first read, or MIG was reconfigured: watch the new set
            self._watch(entities, gpus)
        instances = [gi | self._mig.get((gi["gpu_uuid"], gi["gi_id"]), {}) for gi in instances]
        values = self._reader.GetLatestEntityValuesAsFieldIdDict() if entities else {}
        if entities and not values:  # DcgmReader swallows CONNECTION_NOT_VALID and returns {}
            self._entities, self.handle = None, None  # reconnect on the next read
            raise ConnectionError("DCGM returned no values: is nv-hostengine running / reachable?")
        return {"gpus": gpus, "instances": instances, "values": values}

    def _instances(self) -> list[dict]:
        hierarchy = self.dcgm.dcgm_agent.dcgmGetGpuInstanceHierarchy(self.handle.handle)
        out = []
        for e in hierarchy.entityList[: hierarchy.count]:
            if e.entity.entityGroupId != FE_GPU_I:
                continue  # compute instances: dcgm-exporter reports per GPU instance
            gi = {"entity_id": e.entity.entityId, "gpu_id": e.parent.entityId, "gpu_uuid": _text(e.info.gpuUuid),
                  "gi_id": e.info.nvmlInstanceId, "profile_id": e.info.nvmlMigProfileId}
            out.append(gi)
        return out

    def _watch(self, entities: tuple, gpus: list[dict]) -> None:
        self._mig = self._mig_identities() if any(e[0] == FE_GPU_I for e in entities) else {}
        structs = self.dcgm.dcgm_structs
        pairs = []
        for group, entity in entities:
            pair = structs.c_dcgmGroupEntityPair_t()
            pair.entityGroupId, pair.entityId = group, entity
            pairs.append(pair)
        if self._reader is not None:
            self._reader.Shutdown()
        interval_us = max(100_000, int(self.options.interval_s * 1e6))  # DCGM's minimum sample period
        self._reader = self.dcgm.DcgmReader.DcgmReader(fieldIds=self.fields, updateFrequency=interval_us,
                                                       maxKeepAge=60.0, entities=pairs,
                                                       fieldGroupName="gpuwatch_fields")
        self._reader.SetHandle(self.handle.handle)
        self._entities = entities
        log.info("DCGM: watching %d fields on %d entities (%d GPUs)", len(self.fields), len(entities), len(gpus))

    def _mig_identities(self) -> dict:
        try:

            module = self._nvml or importlib.import_module("pynvml")
            module.nvmlInit()
            return {key: {"mig_uuid": gi["uuid"], "placement_start": gi["placement_start"],
                          "placement_size": gi["placement_size"]}
                    for key, gi in nvml_source.mig_identities(module).items()}
        except Exception as exc:  # MIG series still work; only kubelet's MIG-UUID ids won't match
            log.warning("NVML unavailable for MIG UUIDs/placements (%s); MIG attribution by MIG UUID disabled", exc)
            return {}

    def close(self) -> None:
        if self._reader is not None:
            self._reader.Shutdown()
        if self.handle is not None:
            self.handle.Shutdown()


def parse(raw: dict, *, node: str) -> Snapshot:
    """Plain-data DCGM read -> Snapshot (field ids kept; sentinels and strings dropped)."""
    values = {int(g): {int(e): v for e, v in ents.items()} for g, ents in raw["values"].items()}
    gpus = {g["gpu_id"]: g for g in raw["gpus"]}
    readings, lost, versions = [], [], _versions(values, raw)
    mig_parents = {i["gpu_id"] for i in raw["instances"]}
    for gpu_id, gpu in gpus.items():
        if gpu_id in mig_parents:
            continue
        fields = values.get(FE_GPU, {}).get(gpu_id, {})
        reading = _reading(_device(gpu, node, fields, versions), fields)
        if not reading.values:  # DCGM blanks every field of a GPU that fell off the bus
            lost.append(gpu["uuid"])
        readings.append(reading)
    for gi in raw["instances"]:
        fields = values.get(FE_GPU_I, {}).get(gi["entity_id"], {})
        profile = _string(fields.get(FI_DEV_NAME) or fields.get(str(FI_DEV_NAME)))
        readings.append(_reading(_device(gpus[gi["gpu_id"]], node, fields, versions, gi=gi, profile=profile), fields))
    problems = tuple(f"DCGM has no values for GPU {uuid} (lost?)" for uuid in lost)
    return Snapshot(source="dcgm", readings=tuple(readings), lost=tuple(lost), problems=problems, **versions)


def _versions(values: dict, raw: dict) -> dict[str, str | None]:
    """The node's driver and CUDA versions: global fields, read on the first entity that has them."""
    driver, cuda = None, None
    for entity in [*values.get(FE_GPU, {}).values(), *values.get(FE_GPU_I, {}).values()]:
        got = {int(f): v for f, v in entity.items()}
        driver = driver or _string(got.get(FI_DRIVER_VERSION))
        cuda = cuda or cuda_version(got.get(FI_CUDA_VERSION))
    return {"driver_version": driver or raw.get("driver_version"), "cuda_driver_version": cuda}


def _device(gpu: dict, node: str, fields: dict, versions: dict, *, gi: dict | None = None,
            profile: str | None = None) -> Device:
    total_mib = fields.get(FI_FB_TOTAL, fields.get(str(FI_FB_TOTAL)))
    total = total_mib << 20 if isinstance(total_mib, int) and not is_blank(total_mib) else 0
    base = {"node": node, "gpu_uuid": gpu["uuid"], "gpu_index": gpu["gpu_id"], "gpu_model": gpu["model"],
            "fb_total_bytes": total, "pci_bus_id": gpu["pci_bus_id"], **versions}
    if gi is None:
        return Device(**base)
    return Device(**base, mig_gi_id=gi["gi_id"], mig_profile=profile, mig_profile_id=gi.get("profile_id"),
                  mig_placement_start=gi.get("placement_start"), mig_placement_size=gi.get("placement_size"),
                  mig_uuid=gi.get("mig_uuid"))


def _reading(device: Device, fields: dict) -> DeviceReading:
    values = {}
    for fid, value in fields.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or is_blank(value) or int(fid) in SYSTEM_IDS:
            continue
        values[int(fid)] = value
    return DeviceReading(device, values)


def is_blank(value: int | float) -> bool:
    """DCGM's BLANK / NOT_FOUND / NOT_SUPPORTED / NOT_PERMISSIONED sentinels (int32, int64, fp64)."""
    return value >= (FP64_BLANK if isinstance(value, float) else INT64_BLANK)


def _string(value) -> str | None:
    value = _text(value)
    return value if isinstance(value, str) and value and not value.startswith("<<<") else None


def _text(value):
    return value.decode() if isinstance(value, bytes) else value
