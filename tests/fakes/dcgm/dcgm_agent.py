"""FAKE stand-in for DCGM's dcgm_agent.py: dcgmGetGpuInstanceHierarchy(dcgm_handle) -> the
c_dcgmMigHierarchy_v2 struct, GPU instances (FE_GPU_I) with their FE_GPU parent;
dcgmGetDeviceTopology(dcgm_handle, gpuId) -> c_dcgmDeviceTopology_v2 (cpuAffinityMask, numGpus,
gpuPaths[].gpuId/path/localNvLinkIds); dcgmSelectGpusByTopology(dcgmHandle, inputGpuIds, numGpus,
hintFlags) -> a c_int64 bitmask of the chosen GPUs.

Scenario key ``topology``: {"<gpuId>": {"cpus": "0-55,112-167", "paths": {"<peer gpuId>": path}}}, with
path the DCGM_TOPOLOGY_* bits; ``topology_error``: a DCGM status every topology call fails with."""

import ctypes
from itertools import combinations

import _fake_state
import dcgm_structs


def dcgmGetGpuInstanceHierarchy(dcgm_handle):
    hierarchy = dcgm_structs.c_dcgmMigHierarchy_v2()
    instances = _fake_state.get().get("instances", [])
    hierarchy.count = len(instances)
    for slot, gi in zip(hierarchy.entityList, instances, strict=False):
        slot.entity.entityGroupId, slot.entity.entityId = 4, gi["entity_id"]
        slot.parent.entityGroupId, slot.parent.entityId = 1, gi["gpu_id"]
        slot.info.gpuUuid = gi["gpu_uuid"].encode()
        slot.info.nvmlInstanceId, slot.info.nvmlMigProfileId = gi["gi_id"], gi["profile_id"]
    return hierarchy


def dcgmGetDeviceTopology(dcgm_handle, gpuId):
    gpu = _topology().get(str(gpuId))
    if gpu is None:
        raise dcgm_structs.DCGMError(dcgm_structs.DCGM_ST_NOT_SUPPORTED)
    topo = dcgm_structs.c_dcgmDeviceTopology_v2()
    topo.version = dcgm_structs.dcgmDeviceTopology_version2
    for cpu in _expand(gpu.get("cpus") or ""):
        topo.cpuAffinityMask[cpu // 64] |= 1 << (cpu % 64)
    paths = sorted((int(peer), path) for peer, path in gpu.get("paths", {}).items())
    topo.numGpus = len(paths)
    for slot, (peer, path) in zip(topo.gpuPaths, paths, strict=False):
        slot.gpuId, slot.path = peer, path
        links = path >> 8
        slot.localNvLinkIds = (1 << links.bit_length()) - 1 if links else 0
    return topo


def dcgmSelectGpusByTopology(dcgmHandle, inputGpuIds, numGpus, hintFlags):
    """The k GPUs of ``inputGpuIds`` (0 = all) whose worst pair is best: most NVLinks, then the
    nearest PCIe level; fewer when fewer are given (as DCGM does)."""
    topology = _topology()
    ids = [int(g) for g in topology if inputGpuIds == 0 or inputGpuIds >> int(g) & 1]
    chosen = max(combinations(sorted(ids), min(numGpus, len(ids))), key=lambda c: _worst(topology, c), default=())
    return ctypes.c_int64(sum(1 << g for g in chosen))


def _worst(topology, combo):
    scores = [_score(topology[str(a)]["paths"].get(str(b), 0)) for a, b in combinations(combo, 2)]
    return (min(scores) if scores else (0, 0), [-g for g in combo])


def _score(path):
    return ((path >> 8).bit_length(), -(path & 0xFF)) if path else (-1, 0)


def _topology():
    scenario = _fake_state.get()
    if scenario.get("topology_error") is not None:
        raise dcgm_structs.DCGMError(scenario["topology_error"])
    return scenario.get("topology", {})


def _expand(cpus):
    out = []
    for part in filter(None, cpus.split(",")):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out
