"""GPU topology through NVML (pynvml): per GPU pair the PCIe common ancestor and P2P NVLink status,
per NVLink its state and the device at its far end, NUMA node, CPU affinity and multi-node NVLink
fabric info. Read-only. ``read(nvml)`` does the I/O and returns plain data; ``parse(raw)`` (pure)
returns a :class:`NodeTopology` (docs/architecture.md#topology).

How a pair's link is decided:

- **NV** only when ``nvmlDeviceGetP2PStatus(a, b, NVML_P2P_CAPS_INDEX_NVLINK)`` is OK. Per-link
  ``nvmlDeviceGetNvLinkState`` only says the local lanes are up (an NVSwitch board without Fabric
  Manager has every link up and no NVLink P2P), so it never makes a pair NV on its own.
- **Bonded link count** (``NV<n>``, any n): links whose far end (``nvmlDeviceGetNvLinkRemotePciInfo_v2``)
  is the peer GPU, plus, where links end on NVSwitches (``nvmlDeviceGetNvLinkRemoteDeviceType``),
  every active switch link of the GPU reaches every peer through the switch fabric: the pair gets the
  smaller of the two GPUs' active switch-link counts (a GPU with a link down limits the pair).
- **PCIe** otherwise, from ``nvmlDeviceGetTopologyCommonAncestor``: INTERNAL (two GPUs on one board)
  and SINGLE -> PIX, MULTIPLE -> PXB, HOSTBRIDGE -> PHB, NODE -> NODE, SYSTEM -> SYS.

NUMA node = the node the GPU is attached to (nvidia-smi's "NUMA Affinity"): NVML's memory affinity at
node scope where it names one node, else sysfs ``numa_node`` of the GPU's PCI device.
``nvmlDeviceGetNumaNodeId`` is deliberately not used: NVML documents it for platforms where the GPU
itself is a NUMA node (Grace Hopper/Blackwell), where it is the GPU memory's own node ("GPU NUMA ID"),
not the CPU node it hangs off. Fabric info (``nvmlDeviceGetGpuFabricInfoV``, else the older
``nvmlDeviceGetGpuFabricInfo``) is kept only with a non-zero cluster UUID: single-node Hopper
reports state Completed with an all-zero cluster UUID and clique 0 (captured on a real H100), which
names no multi-node NVLink domain. Every call that raises an NVMLError leaves its fact out.
"""

from __future__ import annotations

import ctypes

from gpuwatch.sources.node_topology import (
    NodeTopology,
    both_directions,
    bus_key,
    cpu_list,
    single_node,
    sysfs_numa_node,
    unknown,
)

# nvmlGpuTopologyLevel_t -> link class (gpuwatch.topology.LINKS)
LEVELS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
P2P_CAPS_INDEX_NVLINK, P2P_STATUS_OK = 2, 0  # NVML_P2P_CAPS_INDEX_NVLINK, NVML_P2P_STATUS_OK
DEVICE_TYPE_GPU, DEVICE_TYPE_SWITCH = 0, 2  # NVML_NVLINK_DEVICE_TYPE_*
AFFINITY_SCOPE_NODE = 0  # NVML_AFFINITY_SCOPE_NODE
FABRIC_STATES = {1: "not_started", 2: "in_progress", 3: "completed"}  # NVML_GPU_FABRIC_STATE_* (0: not supported)
MAX_LINKS = 18  # NVLink ports per GPU up to Blackwell, where the binding lacks NVML_NVLINK_MAX_LINKS
CPU_SET_WORDS = 64  # 64-bit words of CPU mask asked for: 4096 logical CPUs
NODE_SET_WORDS = 4  # 256 NUMA nodes


# --- read: all I/O ------------------------------------------------------------------------------

def read(nvml, *, sys_root: str = "/sys") -> dict:
    """Every GPU's facts and every unordered pair's answers, as JSON-able data (NVML must be
    initialised). A GPU whose handle or UUID cannot be read is left out and named in ``problems``."""
    gpus, handles, problems = [], [], []
    for index in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(index)
            gpu = {"index": index, "uuid": _text(nvml.nvmlDeviceGetUUID(h)),
                   "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(h).busId)}
        except nvml.NVMLError as exc:
            problems.append(f"GPU {index}: {exc}")
            continue
        gpu |= _read_gpu(nvml, h, gpu["pci_bus_id"], sys_root=sys_root)
        gpus.append(gpu)
        handles.append(h)
    pairs = []
    for i, (a, ha) in enumerate(zip(gpus, handles, strict=True)):
        for b, hb in zip(gpus[i + 1:], handles[i + 1:], strict=True):
            pairs.append({"gpu": a["uuid"], "peer": b["uuid"],
                          "level": _call(nvml, nvml.nvmlDeviceGetTopologyCommonAncestor, ha, hb),
                          "p2p_nvlink": _call(nvml, nvml.nvmlDeviceGetP2PStatus, ha, hb, P2P_CAPS_INDEX_NVLINK)})
    return {"gpus": gpus, "pairs": pairs, "problems": problems}


def _read_gpu(nvml, h, bus_id: str, *, sys_root: str) -> dict:
    memory_nodes = _call(nvml, nvml.nvmlDeviceGetMemoryAffinity, h, NODE_SET_WORDS, AFFINITY_SCOPE_NODE)
    cpus = _call(nvml, nvml.nvmlDeviceGetCpuAffinity, h, CPU_SET_WORDS)
    return {"memory_affinity": None if memory_nodes is None else [int(w) for w in memory_nodes],
            "sysfs_numa_node": sysfs_numa_node(bus_id, sys_root=sys_root),
            "cpu_affinity": None if cpus is None else [int(w) for w in cpus],
            "nvlinks": _read_nvlinks(nvml, h), "fabric": _read_fabric(nvml, h)}


def _read_nvlinks(nvml, h) -> list[dict]:
    """The GPU's active NVLinks: link number, far-end device type and PCI bus id (None unknown)."""
    out = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", MAX_LINKS)):
        if not _call(nvml, nvml.nvmlDeviceGetNvLinkState, h, link):
            continue  # inactive, or no such link / no NVLink on this GPU
        remote = _call(nvml, nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
        out.append({"link": link, "remote_type": _call(nvml, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, link),
                    "remote_bus_id": None if remote is None else _text(remote.busId)})
    return out


def _read_fabric(nvml, h) -> dict | None:
    """Fabric info from the versioned call, else the original one; None where neither answers."""
    for call, struct in (("nvmlDeviceGetGpuFabricInfoV", "c_nvmlGpuFabricInfoV_t"),
                         ("nvmlDeviceGetGpuFabricInfo", "c_nvmlGpuFabricInfo_t")):
        if not hasattr(nvml, call) or not hasattr(nvml, struct):
            continue  # an older nvidia-ml-py without the binding
        info = getattr(nvml, struct)()
        if _call(nvml, getattr(nvml, call), h, ctypes.byref(info)) is None:
            continue
        return {"cluster_uuid": bytes(info.clusterUuid).hex(), "clique_id": int(info.cliqueId),
                "state": int(info.state), "status": int(info.status)}
    return None


def _call(nvml, fn, *args):
    """``fn(*args)``, or None where NVML raises (not supported, no such function, no such link)."""
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


# --- parse: pure --------------------------------------------------------------------------------

def parse(raw: dict) -> NodeTopology:
    """``read()``'s data -> NodeTopology (see the module docstring for each rule)."""
    gpus = raw["gpus"]
    known = {"gpus": {g["uuid"]: g["index"] for g in gpus}, "numa": {g["uuid"]: numa_node(g) for g in gpus},
             "cpu_affinity": {g["uuid"]: c for g in gpus if (c := cpu_list(g.get("cpu_affinity") or ()))},
             "fabric": {g["uuid"]: f for g in gpus if (f := fabric(g.get("fabric")))}}
    by_uuid = {g["uuid"]: g for g in gpus}
    links = [(p["gpu"], p["peer"], *link) for p in raw["pairs"]
             if (link := pair_link(p, by_uuid[p["gpu"]], by_uuid[p["peer"]])) is not None]
    if len(gpus) > 1 and not links:
        why = "; ".join(raw.get("problems") or ()) or "nvmlDeviceGetTopologyCommonAncestor and P2P status unanswered"
        return unknown(f"topology unknown: the driver answered no GPU pair ({why})", **known)
    return NodeTopology(**known, links=both_directions(links))


def pair_link(pair: dict, a: dict, b: dict) -> tuple[str, int | None] | None:
    """(link class, bonded NVLinks) of one pair; None when the driver answered neither call."""
    if pair.get("p2p_nvlink") == P2P_STATUS_OK:
        return "NV", nvlink_count(a, b)
    level = pair.get("level")
    return (LEVELS[level], None) if level in LEVELS else None


def nvlink_count(a: dict, b: dict) -> int | None:
    """Bonded NVLinks between two GPUs: direct links from a to b, plus the switch links both have."""
    bus_a, bus_b = bus_key(a["pci_bus_id"]), bus_key(b["pci_bus_id"])
    direct = sum(1 for link in a["nvlinks"] if _reaches(link, bus_b))
    if direct == 0:  # one GPU's far-end info may be missing: count from the other side
        direct = sum(1 for link in b["nvlinks"] if _reaches(link, bus_a))
    switched = min(_switch_links(a), _switch_links(b))
    return (direct + switched) or None


def _reaches(link: dict, bus: str | None) -> bool:
    return bus is not None and link["remote_type"] in (DEVICE_TYPE_GPU, None) and bus_key(link["remote_bus_id"]) == bus


def _switch_links(gpu: dict) -> int:
    return sum(1 for link in gpu["nvlinks"] if link["remote_type"] == DEVICE_TYPE_SWITCH)


def numa_node(gpu: dict) -> int | None:
    """NVML's memory affinity when it names one node, else sysfs' numa_node, else unknown."""
    node = single_node(gpu.get("memory_affinity") or ())
    return node if node is not None else gpu.get("sysfs_numa_node")


def fabric(info: dict | None) -> tuple[str, str, str] | None:
    """(cluster uuid, clique id, state) of a GPU in a multi-node NVLink domain, else None."""
    if not info or info["state"] not in FABRIC_STATES or not int(info["cluster_uuid"] or "0", 16):
        return None
    h = info["cluster_uuid"]
    cluster = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    return cluster, str(info["clique_id"]), FABRIC_STATES[info["state"]]


def read_topology(nvml, *, sys_root: str = "/sys") -> NodeTopology:
    """``parse(read(nvml))``; a failure of the whole read (NVML not initialised, driver gone) is an
    unknown topology naming the error, never an exception in the scrape."""
    try:
        return parse(read(nvml, sys_root=sys_root))
    except nvml.NVMLError as exc:
        return unknown(f"topology unknown: NVML: {exc}")
