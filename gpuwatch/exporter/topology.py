"""The exporter's topology series (docs/architecture.md#topology): which GPUs of the node are linked
how, their NUMA nodes and multi-node NVLink cliques, and what the kubelet has free right now.

The driver's topology (sources/nvml_topology, dcgm_topology, simulate) is static: the collector reads
it at start and again when the node's set of devices changes. The free set is per scrape: the
kubelet's ``GetAllocatableResources`` minus its ``List``. A free k-block is k free GPUs of one whole-GPU
resource whose every pair is NVLink (gpuwatch.topology.Layout.largest_block). Unknown stays absent:
no link series while the driver cannot answer (``gpuwatch_source_up{source="topology"}`` 0), and
``gpuwatch_node_free_nvlink_block{k}`` only where the answer is certain (1: such a block exists; 0:
fewer than k GPUs are free, or every pair among the free GPUs is known and none fits).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from gpuwatch import topology
from gpuwatch.attribution import device_aliases, resolve
from gpuwatch.exporter.spec import Spec
from gpuwatch.model import Allocation, Device
from gpuwatch.sources.kubelet import MIG_RESOURCE_PREFIX, free_devices, split_device_id
from gpuwatch.sources.node_topology import NodeTopology

Samples = Iterator[tuple[Mapping[str, str | None], float]]


@dataclass(frozen=True)
class TopologyView:
    """One refresh's topology facts: the driver's topology (None = not read by this exporter), the
    kubelet's free device ids per resource (None = unknown) and the NUMA nodes it reports per device id."""

    topology: NodeTopology | None = None
    free: Mapping[str, tuple[str, ...]] | None = None
    kubelet_numa: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    shared: frozenset[str] = frozenset()  # resources handed out as replicas (time-slicing, MPS)


def view(node_topology: NodeTopology | None, allocatable: Mapping[str, Mapping[str, tuple[int, ...]]] | None,
         allocations: Sequence[Allocation] | None) -> TopologyView:
    """The view from the driver's topology, the kubelet's allocatable devices (resource -> device id ->
    NUMA nodes) and its allocations; the free set is unknown unless both kubelet calls answered."""
    if allocatable is None or allocations is None:
        return TopologyView(node_topology)
    numa = {raw: nodes for ids in allocatable.values() for raw, nodes in ids.items() if nodes}
    shared = frozenset(r for r, ids in allocatable.items() if any(split_device_id(raw)[1] for raw in ids))
    return TopologyView(node_topology, free_devices(allocatable, allocations), numa, shared)


def _whole_gpus(s: Any) -> dict[str, Device]:
    """uuid -> the device of every GPU served whole (MIG-enabled GPUs are served as instances)."""
    return {r.device.gpu_uuid: r.device for r in s.readings if not r.device.is_mig}


def _physical_gpus(s: Any) -> dict[str, Device]:
    """uuid -> a device of every physical GPU served (a MIG-enabled GPU by its first instance)."""
    out: dict[str, Device] = {}
    for r in s.readings:
        out.setdefault(r.device.gpu_uuid, r.device)
    return out


def _links(s: Any) -> Samples:
    topo = s.topology.topology if s.topology else None
    if topo is None or not topo.ok:
        return
    gpus = _whole_gpus(s)
    rows = [(gpus[a], gpus[b], link, n) for a, b, link, n in topo.links if a in gpus and b in gpus]
    for a, b, link, n in sorted(rows, key=lambda r: (r[0].node, r[0].gpu_index, r[1].gpu_index)):
        yield {"gpu": str(a.gpu_index), "UUID": a.gpu_uuid, "hostname": a.node, "peer_gpu": str(b.gpu_index),
               "peer_UUID": b.gpu_uuid, "link": topology.label(link, n),
               "nvlinks": str(n) if link == "NV" and n else ""}, 1


def numa_nodes(s: Any) -> dict[str, int]:
    """uuid -> NUMA node: the driver's, else the one the kubelet reports for the GPU's device id."""
    view_, gpus = s.topology, _physical_gpus(s)
    out: dict[str, int] = {}
    aliases = device_aliases(r.device for r in s.readings)
    keys = {r.device.key: r.device.gpu_uuid for r in s.readings}
    for raw, nodes in view_.kubelet_numa.items():
        key = resolve(split_device_id(raw)[0], aliases)
        if key in keys and len(nodes) == 1:
            out[keys[key]] = nodes[0]
    driver = view_.topology.numa if view_.topology else {}
    out |= {uuid: node for uuid, node in driver.items() if node is not None}
    return {uuid: node for uuid, node in out.items() if uuid in gpus}


def _numa(s: Any) -> Samples:
    if not s.topology:
        return
    gpus, nodes = _physical_gpus(s), numa_nodes(s)
    cpus = s.topology.topology.cpu_affinity if s.topology.topology else {}
    for uuid, d in sorted(gpus.items(), key=lambda g: (g[1].node, g[1].gpu_index)):
        if uuid in nodes:
            yield {"gpu": str(d.gpu_index), "UUID": uuid, "hostname": d.node, "numa_node": str(nodes[uuid]),
                   "cpu_affinity": cpus.get(uuid, "")}, 1


def _fabric(s: Any) -> Samples:
    topo = s.topology.topology if s.topology else None
    if topo is None:
        return
    for uuid, d in sorted(_physical_gpus(s).items(), key=lambda g: (g[1].node, g[1].gpu_index)):
        if uuid in topo.fabric:
            cluster, clique, state = topo.fabric[uuid]
            yield {"gpu": str(d.gpu_index), "UUID": uuid, "hostname": d.node, "cluster_uuid": cluster,
                   "clique_id": clique, "state": state}, 1


def free_by_node(s: Any) -> dict[str, dict[str, list[str]]]:
    """node -> whole-GPU resource -> the uuids of its free GPUs (MIG resources are not whole GPUs).
    A device id naming no GPU served is counted on the node when the exporter serves one node."""
    gpus, nodes = _whole_gpus(s), sorted({r.device.node for r in s.readings})
    aliases = device_aliases(r.device for r in s.readings)
    keys = {r.device.key: r.device for r in s.readings}
    out: dict[str, dict[str, list[str]]] = {}
    for resource, ids in (s.topology.free or {}).items():
        if resource.startswith(MIG_RESOURCE_PREFIX):
            continue
        for node in nodes:
            out.setdefault(node, {}).setdefault(resource, [])
        for device_id in ids:
            device = keys.get(resolve(device_id, aliases) or "")
            if device is not None and device.gpu_uuid in gpus:
                out[device.node][resource].append(device.gpu_uuid)
            elif device is None and len(nodes) == 1:
                out[nodes[0]][resource].append(device_id)
    return out


def _free_gpus(s: Any) -> Samples:
    if not s.topology or s.topology.free is None:
        return
    for node, resources in sorted(free_by_node(s).items()):
        for resource, free in sorted(resources.items()):
            yield {"hostname": node, "resource": resource}, len(free)


def block_states(layout: topology.Layout, free: Sequence[str]) -> dict[int, int | None]:
    """k -> 1 (a free fully NVLink-connected k-block exists), 0 (certainly none), None (unknown)."""
    mask = layout.mask(free)
    largest = layout.largest_block(mask).bit_count()
    members = layout.members(mask)
    complete = all(layout.ranks[i][j] is not None for i, j in combinations(members, 2))
    return {k: 1 if largest >= k else 0 if len(members) < k or complete else None for k in topology.BLOCK_SIZES}


def _free_blocks(s: Any) -> Samples:
    if not s.topology or s.topology.free is None:
        return
    topo = s.topology.topology
    links = list(topo.links) if topo is not None and topo.ok else []
    whole = _whole_gpus(s).values()
    for node, resources in sorted(free_by_node(s).items()):
        gpus = sorted((d for d in whole if d.node == node), key=lambda d: d.gpu_index)
        layout = topology.Layout.build([d.gpu_uuid for d in gpus], links)
        states = [block_states(layout, free) for resource, free in resources.items()
                  if resource not in s.topology.shared]
        for k in topology.BLOCK_SIZES:
            values = [st[k] for st in states]
            value = 1 if 1 in values else 0 if values and all(v == 0 for v in values) else None
            if value is not None:
                yield {"hostname": node, "k": str(k)}, value


TOPOLOGY_METRICS: tuple[Spec, ...] = (
    Spec("gpuwatch_gpu_link_info", "gauge", "The link between two GPUs of the node, one series per ordered pair: link = "
         "NV then the number of bonded NVLinks, direct or through NVSwitch (NV18), or the PCIe path "
         "PIX/PXB/PHB/NODE/SYS; nvlinks = that number (empty off NVLink); none while the driver cannot answer; always 1.",
         ("gpu", "UUID", "hostname", "peer_gpu", "peer_UUID", "link", "nvlinks"), samples=_links),
    Spec("gpuwatch_gpu_numa_info", "gauge", "The NUMA node the GPU is attached to and its CPU affinity (a Linux CPU "
         "list, empty where unknown); only GPUs whose NUMA node is known; always 1.",
         ("gpu", "UUID", "hostname", "numa_node", "cpu_affinity"), samples=_numa),
    Spec("gpuwatch_gpu_fabric_info", "gauge", "Multi-node NVLink: the GPU's fabric cluster UUID, clique id and "
         "registration state, where the driver reports a cluster; always 1.",
         ("gpu", "UUID", "hostname", "cluster_uuid", "clique_id", "state"), samples=_fabric),
    Spec("gpuwatch_node_free_gpus", "gauge", "Whole GPUs of the resource the kubelet could allocate now "
         "(allocatable minus allocated; a time-sliced GPU only with no replica held).",
         ("hostname", "resource"), samples=_free_gpus),
    Spec("gpuwatch_node_free_nvlink_block", "gauge", "1 if k free GPUs of one whole-GPU resource are all "
         "NVLink-connected pairwise (k = 1: any free GPU), 0 if not; absent where unknown.",
         ("hostname", "k"), samples=_free_blocks),
)
