"""The simulated node types' GPU interconnect, each after a documented layout
(docs/architecture.md#topology): how every GPU pair is linked, as ``nvidia-smi topo -m`` prints it, and
the NUMA node each GPU hangs off.

NVSwitch boards link every pair through the switches with all of a GPU's NVLinks (``NV18``). A PCIe
server is declared as its PCIe tree (per GPU: NUMA node, host bridge, switches from the top down); a
pair's class follows from where the two paths meet, by gpuwatch.topology's definitions: the same leaf
switch PIX, another switch in common PXB, only the host bridge PHB, another host bridge of the NUMA
node NODE, another NUMA node SYS.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from gpuwatch import topology
from gpuwatch.fleet.catalog import GPU_SPECS, Fleet
from gpuwatch.model import BUNDLE_COLUMNS, Device


@dataclass(frozen=True)
class Pcie:
    """Where one GPU sits in its node's PCIe tree."""

    numa: int
    bridge: str  # the host bridge (CPU root port) above it
    switches: tuple[str, ...]  # PCIe switches between that bridge and the GPU, top down


@dataclass(frozen=True)
class NodeLayout:
    """One node type's GPUs by index: NUMA node each, and NVLinks per pair through NVSwitch (0: none,
    then ``pcie`` places each GPU)."""

    numa: tuple[int, ...]
    nvlinks: int = 0
    pcie: tuple[Pcie, ...] = ()

    @property
    def size(self) -> int:
        return len(self.numa)

    def link(self, i: int, j: int) -> tuple[str, int | None]:
        """The link class of GPUs ``i`` and ``j`` and its NVLink count (None off NVLink)."""
        if self.nvlinks:
            return "NV", self.nvlinks
        return _pcie_link(self.pcie[i], self.pcie[j]), None


def _pcie_link(a: Pcie, b: Pcie) -> str:
    if a.numa != b.numa:
        return "SYS"
    if a.bridge != b.bridge:
        return "NODE"
    if a.switches and b.switches and a.switches[-1] == b.switches[-1]:
        return "PIX"
    return "PXB" if set(a.switches) & set(b.switches) else "PHB"


_SOCKETS = (0, 0, 0, 0, 1, 1, 1, 1)

# DGX H100 / HGX H100 (NVIDIA DGX H100 User Guide, system topology): eight H100 SXM5 GPUs, each with its
# 18 NVLink 4 links into four NVSwitch chips, so every pair is NV18; GPUs 0-3 attach to CPU socket 0
# (NUMA node 0), GPUs 4-7 to socket 1 (NUMA node 1).
HGX_H100 = NodeLayout(numa=_SOCKETS, nvlinks=GPU_SPECS["NVIDIA H100 80GB HBM3"]["nvlinks"])

# DGX A100 / HGX A100 (NVIDIA DGX A100 User Guide): eight A100 SXM4 GPUs, 12 NVLink 3 links each into six
# NVSwitch chips: every pair NV12; GPUs 0-3 on socket 0, 4-7 on socket 1 (one NUMA node per socket).
HGX_A100 = NodeLayout(numa=_SOCKETS, nvlinks=GPU_SPECS["NVIDIA A100-SXM4-80GB"]["nvlinks"])

# A typical 2-socket 8x L40S PCIe server (no NVLink), two PCIe switches per socket, two GPUs each. Socket 0:
# switches A (GPU 0, 1) and B (2, 3) under one upper switch on one root port: PIX within a switch, PXB
# across; socket 1: switches C (4, 5) and D (6, 7) on separate root ports: PIX within, NODE across;
# across the sockets SYS.
L40S_PCIE = NodeLayout(numa=_SOCKETS, pcie=(
    Pcie(0, "root-0a", ("upper-0", "switch-A")), Pcie(0, "root-0a", ("upper-0", "switch-A")),
    Pcie(0, "root-0a", ("upper-0", "switch-B")), Pcie(0, "root-0a", ("upper-0", "switch-B")),
    Pcie(1, "root-1a", ("switch-C",)), Pcie(1, "root-1a", ("switch-C",)),
    Pcie(1, "root-1b", ("switch-D",)), Pcie(1, "root-1b", ("switch-D",))))

# GB200 NVL72 compute tray (NVIDIA GB200 NVL72 documentation): two GB200 superchips, i.e. two Grace CPUs
# and four Blackwell GPUs, each GPU's 18 NVLink 5 links into the rack's NVLink switch trays: NV18 between
# the tray's GPUs, and one NVLink domain (clique) across all trays of the rack. GPUs 0-1 hang off Grace 0
# (NUMA node 0), GPUs 2-3 off Grace 1 (NUMA node 1).
GB200_TRAY = NodeLayout(numa=(0, 0, 1, 1), nvlinks=GPU_SPECS["NVIDIA GB200"]["nvlinks"])

LAYOUTS: dict[str, NodeLayout] = {"NVIDIA H100 80GB HBM3": HGX_H100, "NVIDIA A100-SXM4-80GB": HGX_A100,
                                  "NVIDIA L40S": L40S_PCIE, "NVIDIA GB200": GB200_TRAY}


def build(layout: NodeLayout, uuids: Sequence[str]) -> topology.Layout:
    """The topology.Layout of a node of this type whose GPUs, by index, have ``uuids``."""
    links = [(uuids[i], uuids[j], *layout.link(i, j)) for i, j in combinations(range(len(uuids)), 2)]
    return topology.Layout.build(uuids, links, dict(zip(uuids, layout.numa, strict=False)))


def gpus_by_node(devices: Sequence[Device]) -> dict[str, list[Device]]:
    """Each node's whole GPUs (a MIG GPU once, as its parent) in index order."""
    out: dict[str, dict[int, Device]] = {}
    for d in devices:
        out.setdefault(d.node, {}).setdefault(d.gpu_index, d)
    return {node: [gpus[i] for i in sorted(gpus)] for node, gpus in sorted(out.items())}


def link_rows(node: str, gpus: Sequence[Device]) -> list[dict]:
    """model.BUNDLE_COLUMNS["topology"] rows of one node: one per unordered GPU pair."""
    layout = LAYOUTS[gpus[0].gpu_model]
    rows = []
    for a, b in combinations(gpus, 2):
        link, nvlinks = layout.link(a.gpu_index, b.gpu_index)
        topology.rank(link)  # a class gpuwatch.topology does not know is a bug here, not data
        row = {"node": node, "gpu_uuid": a.gpu_uuid, "peer_gpu_uuid": b.gpu_uuid, "link": link, "nvlinks": nvlinks}
        rows.append({name: row[name] for name in BUNDLE_COLUMNS["topology"]})
    return rows


def with_layouts(fleet: Fleet, *, cliques: dict[str, str] | None = None) -> Fleet:
    """``fleet`` with every node's links (Fleet.topology), each device's NUMA node, and ``cliques``
    (node -> "<cluster uuid>/<clique id>") on the nodes of a multi-node NVLink domain."""
    cliques = cliques or {}
    devices = tuple(dataclasses.replace(d, numa_node=LAYOUTS[d.gpu_model].numa[d.gpu_index],
                                        nvlink_clique=cliques.get(d.node)) for d in fleet.devices)
    rows = [row for node, gpus in gpus_by_node(devices).items() for row in link_rows(node, gpus)]
    return dataclasses.replace(fleet, devices=devices, topology=tuple(rows))


def node_layout(fleet: Fleet, node: str) -> topology.Layout:
    """The node's topology.Layout from what the fleet publishes (its topology rows and NUMA nodes), GPU
    positions in index order: what the analyses rebuild from the bundle."""
    gpus = gpus_by_node([d for d in fleet.devices if d.node == node])[node]
    links = [(r["gpu_uuid"], r["peer_gpu_uuid"], r["link"], r["nvlinks"]) for r in fleet.topology if r["node"] == node]
    return topology.Layout.build([g.gpu_uuid for g in gpus], links, {g.gpu_uuid: g.numa_node for g in gpus})
