"""FAKE stand-in for DCGM's dcgm_structs.py: init, errors, operation modes, the entity-pair and
MIG-hierarchy structures (attribute names as in DCGM's ctypes structs)."""

import ctypes

import _fake_state

DCGM_ST_OK = 0
DCGM_ST_CONNECTION_NOT_VALID = -6
DCGM_ST_LIBRARY_NOT_FOUND = -25
DCGM_OPERATION_MODE_AUTO = 1
DCGM_OPERATION_MODE_MANUAL = 2


class DCGMError(Exception):
    def __init__(self, value):
        super().__init__(f"DCGM error {value}")
        self.value = value


def dcgmExceptionClass(status):
    return type(f"DCGMError_{abs(status)}", (DCGMError,), {})


def _dcgmInit(libDcgmPath=None):
    if _fake_state.get().get("library_missing"):
        raise DCGMError(DCGM_ST_LIBRARY_NOT_FOUND)


class c_dcgmGroupEntityPair_t(ctypes.Structure):
    _fields_ = [("entityGroupId", ctypes.c_uint32), ("entityId", ctypes.c_uint32)]


class c_dcgmMigEntityInfo_t(ctypes.Structure):
    _fields_ = [("gpuUuid", ctypes.c_char * 128), ("nvmlGpuIndex", ctypes.c_uint), ("nvmlInstanceId", ctypes.c_uint),
                ("nvmlComputeInstanceId", ctypes.c_uint), ("nvmlMigProfileId", ctypes.c_uint),
                ("nvmlProfileSlices", ctypes.c_uint)]


class c_dcgmMigHierarchyInfo_v2(ctypes.Structure):
    _fields_ = [("entity", c_dcgmGroupEntityPair_t), ("parent", c_dcgmGroupEntityPair_t),
                ("info", c_dcgmMigEntityInfo_t)]


class c_dcgmMigHierarchy_v2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("count", ctypes.c_uint),
                ("entityList", c_dcgmMigHierarchyInfo_v2 * 112)]
