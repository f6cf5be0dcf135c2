"""FAKE stand-in for DCGM's pydcgm.py (DcgmHandle -> DcgmSystem -> discovery), real signatures."""

from types import SimpleNamespace

import _fake_state
import dcgm_structs


class DcgmHandle:
    def __init__(self, handle=None, ipAddress=None, opMode=dcgm_structs.DCGM_OPERATION_MODE_AUTO,
                 persistAfterDisconnect=False, unixSocketPath=None, timeoutMs=0):
        if _fake_state.get().get("hostengine_down") and handle is None:
            raise dcgm_structs.dcgmExceptionClass(dcgm_structs.DCGM_ST_CONNECTION_NOT_VALID)(
                dcgm_structs.DCGM_ST_CONNECTION_NOT_VALID)
        self.handle = handle if handle is not None else 1
        self.address = unixSocketPath or ipAddress or "embedded"

    def GetSystem(self):
        return DcgmSystem(self)

    def Shutdown(self):
        pass


class _Discovery:
    def GetAllSupportedGpuIds(self):
        return [g["gpu_id"] for g in _fake_state.get()["gpus"]]

    def GetGpuAttributes(self, gpuId):
        gpu = next(g for g in _fake_state.get()["gpus"] if g["gpu_id"] == gpuId)
        ids = SimpleNamespace(uuid=gpu["uuid"], pciBusId=gpu["pci_bus_id"], deviceName=gpu["model"])
        return SimpleNamespace(identifiers=ids)


class DcgmSystem:
    def __init__(self, dcgmHandle):
        self._dcgmHandle = dcgmHandle
        self.discovery = _Discovery()
