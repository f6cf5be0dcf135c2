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


# Device topology (dcgmGetDeviceTopology): the real constants and the v2 struct of DCGM 4 (64-bit
# path: the low 8 bits one PCIe level, the upper bits one NVLINK<n> bit, n = the bonded link count)
DCGM_ST_NOT_SUPPORTED = -6
DCGM_MAX_NUM_DEVICES = 32
DCGM_AFFINITY_BITMASK_ARRAY_SIZE = 8
DCGM_TOPO_HINT_F_NONE = 0x00000000
DCGM_TOPOLOGY_BOARD = 0x1
DCGM_TOPOLOGY_SINGLE = 0x2
DCGM_TOPOLOGY_MULTIPLE = 0x4
DCGM_TOPOLOGY_HOSTBRIDGE = 0x8
DCGM_TOPOLOGY_CPU = 0x10
DCGM_TOPOLOGY_SYSTEM = 0x20
for _n in range(1, 37):
    globals()[f"DCGM_TOPOLOGY_NVLINK{_n}"] = 0x100 << (_n - 1)


class c_dcgmDeviceTopologyPath_v2(ctypes.Structure):
    _fields_ = [("gpuId", ctypes.c_uint32), ("path", ctypes.c_uint64), ("localNvLinkIds", ctypes.c_uint64)]


class c_dcgmDeviceTopology_v2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("cpuAffinityMask", ctypes.c_ulong * DCGM_AFFINITY_BITMASK_ARRAY_SIZE),
                ("numGpus", ctypes.c_uint32), ("gpuPaths", c_dcgmDeviceTopologyPath_v2 * (DCGM_MAX_NUM_DEVICES - 1))]


c_dcgmDeviceTopology_t = c_dcgmDeviceTopology_v2
dcgmDeviceTopology_version2 = ctypes.sizeof(c_dcgmDeviceTopology_v2) | 2 << 24  # make_dcgm_version(struct, 2)
