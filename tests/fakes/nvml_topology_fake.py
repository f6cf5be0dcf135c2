"""FAKE NVML topology calls, added to a FakeNvml (tests/fakes/fake_pynvml.py) at the NVML boundary.

``install(fake, layout)`` sets, on that one fake object, the pynvml functions gpuwatch's topology
reader calls, with pynvml's signatures and return shapes: ``nvmlDeviceGetTopologyCommonAncestor(h1,
h2)`` -> an NVML_TOPOLOGY_* int; ``nvmlDeviceGetP2PStatus(h1, h2, index)`` -> an NVML_P2P_STATUS_*
int; ``nvmlDeviceGetNvLinkState(h, link)`` -> 0/1 (INVALID_ARGUMENT past the GPU's links,
NOT_SUPPORTED on a GPU without NVLink); ``nvmlDeviceGetNvLinkRemotePciInfo(h, link)`` -> the real
``nvmlPciInfo_t`` (``busId`` bytes); ``nvmlDeviceGetNvLinkRemoteDeviceType`` -> NVML_NVLINK_DEVICE_TYPE_*;
``nvmlDeviceGetMemoryAffinity(h, size, scope)`` / ``nvmlDeviceGetCpuAffinity(h, size)`` -> ctypes
``c_ulonglong`` arrays; ``nvmlDeviceGetGpuFabricInfoV`` / ``nvmlDeviceGetGpuFabricInfo(h, byref(info))``
fill the real fabric structs. Errors are the real ``NVMLError`` subclasses.

A layout (dict): ``gpus`` [{uuid, name, pci_bus_id, numa_node (None: NVML's memory affinity raises
NOT_SUPPORTED), cpus ("0-55,112-167" or None), nvlinks: one entry per link number, {"switch": bus id}
| {"gpu": peer index} | None (down), fabric: {cluster_uuid (32 hex), clique_id, state, status}}],
``pcie`` (matrix of NVML_TOPOLOGY_* suffixes, e.g. "SINGLE"), ``fabric_manager`` (False: NVSwitch
links are up but P2P over NVLink is not, as on a board whose Fabric Manager is not running), and
``errors`` (pynvml function name -> NVML_ERROR_* name raised by every call of it).
"""

from __future__ import annotations

import ctypes
from functools import partial

import pynvml as _real

from tests.fakes.fake_pynvml import FakeNvml


def scenario(layout: dict) -> dict:
    """The FakeNvml scenario for a layout's GPUs (identity only: topology comes from ``install``)."""
    return {"gpus": [{"uuid": g["uuid"], "name": g["name"], "pci_bus_id": g["pci_bus_id"],
                      "memory": {"total": 80 << 30, "used": 0, "free": 80 << 30}} for g in layout["gpus"]]}


def fake_for(layout: dict) -> FakeNvml:
    """A FakeNvml serving the layout, topology calls installed."""
    fake = FakeNvml(scenario(layout))
    install(fake, layout)
    return fake


def install(fake, layout: dict):
    """Add the topology calls to ``fake`` (a FakeNvml), answering from ``layout``."""
    for name in ("nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState",
                 "nvmlDeviceGetNvLinkRemotePciInfo", "nvmlDeviceGetNvLinkRemoteDeviceType",
                 "nvmlDeviceGetMemoryAffinity", "nvmlDeviceGetCpuAffinity", "nvmlDeviceGetGpuFabricInfoV",
                 "nvmlDeviceGetGpuFabricInfo"):
        setattr(fake, name, partial(_guarded, getattr(_Calls, name[len("nvmlDeviceGet"):]), layout, name))
    return fake


def _guarded(fn, layout: dict, name: str, *args):
    if name in layout.get("errors", {}):
        raise _real.NVMLError(getattr(_real, layout["errors"][name]))
    return fn(layout, *args)


def _error(name: str):
    return _real.NVMLError(getattr(_real, name))


class _Calls:
    @staticmethod
    def TopologyCommonAncestor(layout, h1, h2):
        return getattr(_real, "NVML_TOPOLOGY_" + layout["pcie"][h1.index][h2.index])

    @staticmethod
    def P2PStatus(layout, h1, h2, index):
        if index != _real.NVML_P2P_CAPS_INDEX_NVLINK:
            return _real.NVML_P2P_STATUS_OK
        a, b = layout["gpus"][h1.index], layout["gpus"][h2.index]
        direct = any(link == {"gpu": h2.index} for link in a.get("nvlinks", []))
        switched = _switched(a) and _switched(b) and layout.get("fabric_manager", True)
        return _real.NVML_P2P_STATUS_OK if direct or switched else _real.NVML_P2P_STATUS_NOT_SUPPORTED

    @staticmethod
    def NvLinkState(layout, h, link):
        return int(_link(layout, h, link) is not None)

    @staticmethod
    def NvLinkRemotePciInfo(layout, h, link):
        far = _link(layout, h, link)
        if far is None:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        bus = far["switch"] if "switch" in far else layout["gpus"][far["gpu"]]["pci_bus_id"]
        info = _real.nvmlPciInfo_t()
        info.busId = bus.encode()
        return info

    @staticmethod
    def NvLinkRemoteDeviceType(layout, h, link):
        far = _link(layout, h, link)
        if far is None:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        return _real.NVML_NVLINK_DEVICE_TYPE_SWITCH if "switch" in far else _real.NVML_NVLINK_DEVICE_TYPE_GPU

    @staticmethod
    def MemoryAffinity(layout, h, size, scope):
        node = layout["gpus"][h.index].get("numa_node")
        if node is None:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        return _mask([node], size)

    @staticmethod
    def CpuAffinity(layout, h, size):
        cpus = layout["gpus"][h.index].get("cpus")
        if cpus is None:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        return _mask(_expand(cpus), size)

    @staticmethod
    def GpuFabricInfoV(layout, h, ref):
        return _Calls.GpuFabricInfo(layout, h, ref)

    @staticmethod
    def GpuFabricInfo(layout, h, ref):
        spec = layout["gpus"][h.index].get("fabric")
        if spec is None:
            raise _error("NVML_ERROR_NOT_SUPPORTED")
        info = ref._obj  # the struct behind ctypes.byref(info), as NVML writes through the pointer
        ctypes.memmove(info.clusterUuid, bytes.fromhex(spec["cluster_uuid"]), 16)
        info.cliqueId, info.state, info.status = spec["clique_id"], spec["state"], spec.get("status", 0)
        return _real.NVML_SUCCESS


def _link(layout, h, link):
    links = layout["gpus"][h.index].get("nvlinks")
    if not links:
        raise _error("NVML_ERROR_NOT_SUPPORTED")
    if link >= len(links):
        raise _error("NVML_ERROR_INVALID_ARGUMENT")
    return links[link]


def _switched(gpu: dict) -> bool:
    return any(link and "switch" in link for link in gpu.get("nvlinks", []))


def _expand(cpus: str) -> list[int]:
    out = []
    for part in cpus.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def _mask(bits: list[int], words: int):
    out = (ctypes.c_ulonglong * words)()
    for bit in bits:
        out[bit // 64] |= 1 << (bit % 64)
    return out


# --- documented layouts ---------------------------------------------------------------------------

def hgx_h100(*, fabric_manager: bool = True) -> dict:
    """NVIDIA DGX H100 user guide: 8 H100 SXM5 GPUs all-to-all through 4 NVSwitch chips, 18 NVLink 4
    links per GPU (5, 4, 4 and 5 to the four switches), GPUs 0-3 on CPU socket/NUMA node 0 and 4-7 on
    NUMA node 1 (2 x 56-core CPUs with SMT: CPUs 0-55,112-167 and 56-111,168-223); topo -m prints NV18
    for every pair. Bus ids are those DGX H100 systems report; the switch bus ids and the PCIe levels
    between GPUs (hidden behind NV18 in topo -m: NODE within a socket, SYS across) are illustrative."""
    buses = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"]
    switches = [f"00000000:{b}:00.0" for b in ("05", "06", "07", "08")]
    per_switch = [5, 4, 4, 5]
    gpus = []
    for i, bus in enumerate(buses):
        links = [{"switch": s} for s, n in zip(switches, per_switch, strict=True) for _ in range(n)]
        gpus.append({"uuid": f"GPU-{i:08x}-0400-0000-0000-000000000000", "name": "NVIDIA H100 80GB HBM3",
                     "pci_bus_id": f"00000000:{bus}:00.0", "numa_node": i // 4,
                     "cpus": "0-55,112-167" if i < 4 else "56-111,168-223", "nvlinks": links})
    pcie = [["INTERNAL" if i == j else "NODE" if i // 4 == j // 4 else "SYSTEM" for j in range(8)] for i in range(8)]
    return {"gpus": gpus, "pcie": pcie, "fabric_manager": fabric_manager}


def a100_hgx() -> dict:
    """NVIDIA DGX A100 user guide: 8 A100 SXM4 GPUs through 6 NVSwitches, 12 NVLink 3 links per GPU
    (2 to each switch): topo -m prints NV12. NUMA/CPU layout as the H100 board's (illustrative)."""
    layout = hgx_h100()
    switches = [f"00000000:{b}:00.0" for b in ("05", "06", "07", "08", "09", "0a")]
    for i, gpu in enumerate(layout["gpus"]):
        gpu["uuid"] = f"GPU-{i:08x}-0300-0000-0000-000000000000"
        gpu["name"] = "NVIDIA A100-SXM4-80GB"
        gpu["nvlinks"] = [{"switch": s} for s in switches for _ in range(2)]
    return layout


def l40s_pcie() -> dict:
    """An 8 x L40S PCIe server as the topology issue describes it: two CPU sockets, two PCIe switches
    per socket, two GPUs per switch, no NVLink (L40S has none). Illustrative, built to hold every PCIe
    class topo -m prints: GPUs on one switch PIX; on socket 0 the two switches hang under one upstream
    switch (PXB), on socket 1 off different host bridges (NODE); across sockets SYS."""
    gpus = [{"uuid": f"GPU-{i:08x}-0a00-0000-0000-000000000000", "name": "NVIDIA L40S",
             "pci_bus_id": f"00000000:{0x1a + 0x10 * i:02x}:00.0", "numa_node": i // 4,
             "cpus": "0-31,64-95" if i < 4 else "32-63,96-127"} for i in range(8)]

    def level(i: int, j: int) -> str:
        if i == j:
            return "INTERNAL"
        if i // 4 != j // 4:
            return "SYSTEM"
        if i // 2 == j // 2:
            return "SINGLE"
        return "MULTIPLE" if i < 4 else "NODE"
    return {"gpus": gpus, "pcie": [[level(i, j) for j in range(8)] for i in range(8)]}


def bridged_pair(n: int) -> dict:
    """Two PCIe GPUs joined directly by ``n`` NVLinks (NVLink bridges: topo -m prints NV<n> for any
    n, e.g. NV4 for two RTX A6000 with a bridge); on one PCIe switch, NUMA node 0."""
    gpus = [{"uuid": f"GPU-{i:08x}-0b00-0000-0000-000000000000", "name": "NVIDIA RTX A6000",
             "pci_bus_id": f"00000000:{0x41 + i:02x}:00.0", "numa_node": 0, "cpus": "0-15",
             "nvlinks": [{"gpu": 1 - i}] * n} for i in range(2)]
    return {"gpus": gpus, "pcie": [["INTERNAL", "SINGLE"], ["SINGLE", "INTERNAL"]]}


# DGX-1 with Tesla V100 (NVIDIA's DGX-1 V100 system architecture white paper: "hybrid cube-mesh", six
# NVLink 2 links per GPU, GPUs 0-3 and 4-7 fully connected within their quad, GPU i to i+4 across):
# bonded NVLinks per pair as its nvidia-smi topo -m prints them (0 = no NVLink: SYS).
DGX1_V100_NVLINKS = (
    (0, 1, 1, 2, 2, 0, 0, 0),
    (1, 0, 2, 1, 0, 2, 0, 0),
    (1, 2, 0, 2, 0, 0, 1, 0),
    (2, 1, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 1, 1, 2),
    (0, 2, 0, 0, 1, 0, 2, 1),
    (0, 0, 1, 0, 1, 2, 0, 2),
    (0, 0, 0, 1, 2, 1, 2, 0),
)


def dgx1_v100() -> dict:
    """The DGX-1 V100 hybrid cube-mesh (DGX1_V100_NVLINKS): direct GPU-to-GPU NVLinks, no NVSwitch;
    GPUs 0-3 on NUMA node 0, 4-7 on node 1 (2 x 20-core CPUs with SMT). Bus ids and the PCIe levels
    (NODE within a socket, SYS across) are illustrative."""
    gpus = []
    for i, row in enumerate(DGX1_V100_NVLINKS):
        gpus.append({"uuid": f"GPU-{i:08x}-0100-0000-0000-000000000000", "name": "Tesla V100-SXM2-32GB",
                     "pci_bus_id": f"00000000:{0x06 + 0x20 * i:02x}:00.0", "numa_node": i // 4,
                     "cpus": "0-19,40-59" if i < 4 else "20-39,60-79",
                     "nvlinks": [{"gpu": j} for j, n in enumerate(row) for _ in range(n)]})
    pcie = [["INTERNAL" if i == j else "NODE" if i // 4 == j // 4 else "SYSTEM" for j in range(8)] for i in range(8)]
    return {"gpus": gpus, "pcie": pcie}
