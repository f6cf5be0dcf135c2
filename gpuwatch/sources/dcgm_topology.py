"""GPU topology through DCGM's device topology call (``dcgm_agent.dcgmGetDeviceTopology(handle,
gpuId)``), for nodes read with the dcgm source. ``read()`` does the I/O and returns plain data;
``parse()`` (pure) returns a :class:`NodeTopology` (docs/architecture.md#topology).

Each ``gpuPaths[]`` entry's ``path`` is a bitmask (dcgm_structs.h, ``dcgmGpuTopologyLevel_t``): the
low 8 bits one PCIe level (BOARD, SINGLE -> PIX; MULTIPLE -> PXB; HOSTBRIDGE -> PHB; CPU -> NODE;
SYSTEM -> SYS), the upper bits one ``DCGM_TOPOLOGY_NVLINK<n>`` bit (0x100 << (n - 1)) whose n is the
number of bonded NVLinks; an NVLink bit makes the pair NV<n>. ``cpuAffinityMask`` (64-bit words) is
the GPU's CPU affinity. DCGM reports no NUMA node, so it comes from sysfs (the GPU's PCI device), and
no fabric clique here (left unknown). ``dcgmSelectGpusByTopology`` serves as an independent check of
the free-block answer where DCGM runs (:func:`select_gpus`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import SimpleNamespace

from gpuwatch.sources.node_topology import (
    NodeTopology,
    both_directions,
    cpu_list,
    sysfs_numa_node,
    unknown,
)

PCI_LEVELS = {0x1: "PIX", 0x2: "PIX", 0x4: "PXB", 0x8: "PHB", 0x10: "NODE", 0x20: "SYS"}
PCI_MASK = 0xFF
TOPO_HINT_NONE = 0  # DCGM_TOPO_HINT_F_NONE


def read(dcgm: SimpleNamespace, handle, gpus: Mapping[int, tuple[str, str | None]], *,
         sys_root: str = "/sys") -> dict:
    """``gpus``: DCGM gpuId -> (uuid, PCI bus id). Per GPU its CPU mask and paths, or the error."""
    out = []
    for gpu_id, (uuid, bus_id) in sorted(gpus.items()):
        gpu = {"gpu_id": gpu_id, "uuid": uuid, "sysfs_numa_node": sysfs_numa_node(bus_id, sys_root=sys_root)}
        try:
            topo = dcgm.dcgm_agent.dcgmGetDeviceTopology(handle, gpu_id)
        except dcgm.dcgm_structs.DCGMError as exc:
            out.append(gpu | {"error": str(exc)})
            continue
        out.append(gpu | {"cpu_affinity": [int(w) for w in topo.cpuAffinityMask],
                          "paths": [{"gpu_id": int(p.gpuId), "path": int(p.path)}
                                    for p in topo.gpuPaths[: topo.numGpus]]})
    return {"gpus": out}


def parse(raw: dict) -> NodeTopology:
    """``read()``'s data -> NodeTopology; a GPU whose paths DCGM did not give has no link rows."""
    gpus = raw["gpus"]
    uuid_of = {g["gpu_id"]: g["uuid"] for g in gpus}
    known = {"gpus": {g["uuid"]: g["gpu_id"] for g in gpus}, "numa": {g["uuid"]: g.get("sysfs_numa_node") for g in gpus},
             "cpu_affinity": {g["uuid"]: c for g in gpus if (c := cpu_list(g.get("cpu_affinity") or ()))}}
    links = [(g["uuid"], uuid_of[p["gpu_id"]], *link) for g in gpus for p in g.get("paths", ())
             if p["gpu_id"] in uuid_of and p["gpu_id"] != g["gpu_id"] and (link := path_link(p["path"])) is not None]
    if len(gpus) > 1 and not links:
        errors = sorted({g["error"] for g in gpus if "error" in g})
        return unknown("topology unknown: DCGM answered no GPU pair" + (f" ({'; '.join(errors)})" if errors else ""),
                       **known)
    return NodeTopology(**known, links=both_directions(links))


def path_link(path: int) -> tuple[str, int | None] | None:
    """A DCGM path bitmask -> (link class, bonded NVLinks); None when it names neither."""
    nvlink = path & ~PCI_MASK
    if nvlink:
        return "NV", nvlink.bit_length() - 8
    return (PCI_LEVELS[path & PCI_MASK], None) if (path & PCI_MASK) in PCI_LEVELS else None


def read_topology(dcgm: SimpleNamespace, handle, gpus: Mapping[int, tuple[str, str | None]], *,
                  sys_root: str = "/sys") -> NodeTopology:
    """``parse(read(...))``; a failing hostengine is an unknown topology naming the error."""
    try:
        return parse(read(dcgm, handle, gpus, sys_root=sys_root))
    except Exception as exc:  # connection lost, bindings without the call: never fail the scrape
        return unknown(f"topology unknown: DCGM: {type(exc).__name__}: {exc}")


def read_source(source, *, sys_root: str = "/sys") -> NodeTopology:
    """The topology of the GPUs a connected ``DcgmSource`` sees (gpuId, UUID, bus id from discovery)."""
    if source.handle is None:
        return unknown("topology unknown: DCGM is not connected")
    try:
        system = source.handle.GetSystem()
        gpus = {}
        for gpu_id in system.discovery.GetAllSupportedGpuIds():
            ids = system.discovery.GetGpuAttributes(gpu_id).identifiers
            gpus[gpu_id] = (_text(ids.uuid), _text(ids.pciBusId))
    except Exception as exc:  # hostengine gone between the read and this call
        return unknown(f"topology unknown: DCGM: {type(exc).__name__}: {exc}")
    return read_topology(source.dcgm, source.handle.handle, gpus, sys_root=sys_root)


def select_gpus(dcgm: SimpleNamespace, handle, free_gpu_ids: Iterable[int], k: int) -> tuple[int, ...] | None:
    """DCGM's choice of ``k`` GPUs among the free ones (``dcgmSelectGpusByTopology``), by gpuId;
    None when fewer than k are free (an empty input mask would mean every GPU to DCGM)."""
    ids = sorted(set(free_gpu_ids))
    if k < 1 or len(ids) < k:
        return None
    chosen = dcgm.dcgm_agent.dcgmSelectGpusByTopology(handle, sum(1 << g for g in ids), k, TOPO_HINT_NONE)
    mask = int(getattr(chosen, "value", chosen))
    return tuple(g for g in range(mask.bit_length()) if mask >> g & 1)


def _text(value):
    return value.decode() if isinstance(value, bytes) else value
