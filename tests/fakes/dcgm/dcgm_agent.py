"""FAKE stand-in for DCGM's dcgm_agent.py: dcgmGetGpuInstanceHierarchy(dcgm_handle) -> the
c_dcgmMigHierarchy_v2 struct, GPU instances (FE_GPU_I) with their FE_GPU parent."""

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
