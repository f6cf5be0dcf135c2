"""``nvidia-smi topo -m`` text -> the GPU link matrix, NUMA node and CPU affinity of one node.

The matrix: a header row of device columns (``GPU0`` ... ``GPUn``, ``NIC0`` ...) followed by ``CPU
Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``; one row per device; ``X`` on
the diagonal. Between two GPUs a cell is ``NV<n>`` (a bonded set of n >= 1 NVLinks: NV1, NV4, NV12,
NV18 ...) or a PCIe path class, best to worst: PIX, PXB, PHB, NODE, SYS. It is read as written or as
pasted (tabs or spaces, escapes with or without their ESC byte, run-together header cells:
topo_cells.py). Refused, naming line and column: a cell that is no link (a guessed link would be a
made-up topology), a matrix that is not square (a paste cut short) or not symmetric (which of the
two cells is true?), a NUMA or CPU cell that is no list. A NUMA Affinity list (``0-1``,
``0,3-9,11-17``) is no single node: the GPU's NUMA node is then unknown.

The matrix names GPUs by index only. ``listing`` reads an ``nvidia-smi -L`` listing in the same
capture (``GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-...)``) and ``frames`` turns the matrix into the
bundle's ``topology`` rows and the devices' ``numa_node`` for one node, GPU index -> UUID from that
listing, else from the node's devices already in the store (``gpuwatch ingest --from topo.txt
--node NAME``). A capture describes devices; it never creates one (devices are billed): the node's
GPUs come from its own data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuwatch import topology
from gpuwatch.ingest import topo_cells
from gpuwatch.ingest.topo_cells import TopoError

__all__ = ["ListedGpu", "TopoError", "TopoGpu", "TopoLink", "Topology", "frames", "has_matrix", "listing", "parse"]
PCIE_LINKS = topology.PCIE_LINKS  # best to worst, per nvidia-smi's legend
_ESCAPE = topo_cells.ESCAPE
_GPU = re.compile(r"^GPU(\d+)$")
_LISTED = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)\s]+)\)$")


@dataclass(frozen=True)
class TopoGpu:
    """One GPU row: its index, CPU affinity (as printed, e.g. ``0-55,112-167``) and NUMA node."""

    index: int
    cpu_affinity: str | None
    numa_node: int | None


@dataclass(frozen=True)
class TopoLink:
    """The path between two GPUs: ``NV`` with ``nvlinks`` bonded links, or a PCIe class."""

    gpu: int
    peer: int
    link: str
    nvlinks: int | None


@dataclass(frozen=True)
class Topology:
    gpus: tuple[TopoGpu, ...]
    links: tuple[TopoLink, ...]

    def link(self, gpu: int, peer: int) -> TopoLink | None:
        """The link from ``gpu`` to ``peer`` (None when either is unknown or they are the same)."""
        return next((x for x in self.links if x.gpu == gpu and x.peer == peer), None)


def parse(text: str, *, source: str = "<text>") -> Topology:
    """Parse the matrix out of ``text`` (a bare ``topo -m`` output or a capture that contains one), as
    nvidia-smi writes it or as people paste it (topo_cells.py); a matrix that is not whole, square and
    symmetric, or a cell that is no link, is an error naming the line and column."""
    table = topo_cells.read(text, source=source)
    gpus, links = [], []
    for row in table.rows:
        where = f"{source}: line {row.line}"
        index = _gpu_index(row.name)
        if index in {g.index for g in gpus}:
            raise TopoError(f"{where}: GPU{index} has a second row")
        for column, cell in zip(table.devices, row.links, strict=True):
            link = _cell(index, column, cell, where=f"{where}, column {column}")
            if link is not None:
                links.append(link)
        affinity = dict(zip(table.affinity, row.affinity, strict=True))
        gpus.append(TopoGpu(index, _cpus(affinity.get("CPU Affinity"), where=f"{where}, column CPU Affinity"),
                            _numa(affinity.get("NUMA Affinity"), where=f"{where}, column NUMA Affinity")))
        _numa_id(affinity.get("GPU NUMA ID"), where=f"{where}, column GPU NUMA ID")
    _check_square(gpus, table, source=source)
    topology = Topology(tuple(gpus), tuple(links))
    _check_symmetric(topology, source=source)
    return topology


def _gpu_index(name: str) -> int:
    return int(_GPU.match(name)[1])


def _cell(index: int, column: str, value: str, *, where: str) -> TopoLink | None:
    """The link in one cell (None on the diagonal and toward NICs, whose cells are still checked)."""
    peer = _GPU.match(column)
    if peer is not None and int(peer[1]) == index:
        if value != "X":
            raise TopoError(f"{where}: {value!r} on the diagonal (nvidia-smi prints X for a GPU and itself)")
        return None
    try:
        link, nvlinks = topology.parse_label(value)
    except ValueError:
        raise TopoError(f"{where}: {value!r} is not a link (NV<n> with n >= 1, {', '.join(PCIE_LINKS)})") from None
    return TopoLink(index, int(peer[1]), link, nvlinks) if peer is not None else None


def _check_square(gpus: list[TopoGpu], table, *, source: str) -> None:
    """Every GPU column has a row and every GPU row a column."""
    columns = {_gpu_index(c) for c in table.devices if _GPU.match(c)}
    rows = {g.index for g in gpus}
    if not rows:
        raise TopoError(f"{source}: line {table.header_line}: the 'topo -m' header has no GPU rows under it")
    if rows != columns:
        missing = sorted(columns - rows)
        what = (f"GPU{missing[0]} has a column but no row" if missing else
                f"GPU{sorted(rows - columns)[0]} has a row but no column")
        raise TopoError(f"{source}: line {table.header_line}: the matrix is not square: {what}")


def _check_symmetric(parsed: Topology, *, source: str) -> None:
    """nvidia-smi prints each pair twice; the two cells must agree (which one would be true?)."""
    for x in parsed.links:
        back = parsed.link(x.peer, x.gpu)
        if back is not None and (back.link, back.nvlinks) != (x.link, x.nvlinks) and x.gpu < x.peer:
            raise TopoError(f"{source}: the matrix is not symmetric: GPU{x.gpu} -> GPU{x.peer} is "
                            f"{topology.label(x.link, x.nvlinks)} but GPU{x.peer} -> GPU{x.gpu} is "
                            f"{topology.label(back.link, back.nvlinks)}")


_LIST = re.compile(r"^\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*$")  # 0-55,112-167 / 0,3-9,11-17


def _known(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value


def _cpus(value: str | None, *, where: str) -> str | None:
    value = _known(value)
    if value is not None and not _LIST.match(value):
        raise TopoError(f"{where}: {value!r} is not a CPU list (e.g. 0-55,112-167) or N/A")
    return value


def _numa(value: str | None, *, where: str) -> int | None:
    """The GPU's NUMA node: one number. A list (``0-1``, ``0,3-9,11-17``: the GPU is as close to several
    nodes) is no single node, so unknown; anything else is an error."""
    value = _known(value)
    if value is None:
        return None
    if not _LIST.match(value):
        raise TopoError(f"{where}: {value!r} is not a NUMA node list (e.g. 0, 0-1, 0,3-9) or N/A")
    return int(value) if value.isdigit() else None


def _numa_id(value: str | None, *, where: str) -> None:
    value = _known(value)
    if value is not None and not value.isdigit():
        raise TopoError(f"{where}: {value!r} is not a NUMA node id or N/A")


@dataclass(frozen=True)
class ListedGpu:
    """One line of ``nvidia-smi -L``: index, model name (as NVML names it), UUID."""

    index: int
    model: str
    uuid: str


def has_matrix(text: str) -> bool:
    """Whether ``text`` holds a ``topo -m`` matrix (a /metrics page or a bundle file never does)."""
    return topo_cells.header_at(text.splitlines()) is not None


def listing(text: str, *, source: str = "<text>") -> dict[int, ListedGpu]:
    """GPU index -> its ``nvidia-smi -L`` line, from every such line in ``text`` (captures repeat the
    listing in several sections); an index listed with two different UUIDs is an error."""
    out: dict[int, ListedGpu] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LISTED.match(_ESCAPE.sub("", line).strip())
        if match is None:
            continue
        gpu = ListedGpu(int(match[1]), match[2].strip(), match[3])
        if out.get(gpu.index, gpu).uuid != gpu.uuid:
            raise TopoError(f"{source}: line {number}: GPU {gpu.index} is listed as {gpu.uuid} "
                            f"and as {out[gpu.index].uuid}")
        out[gpu.index] = gpu
    return out


def frames(parsed: Topology, *, node: str, listed: dict[int, ListedGpu], stored, source: str = "<text>") -> dict:
    """Bundle frames for ``node``: ``topology`` (every GPU pair of the matrix) and ``devices`` (the
    node's stored rows of each GPU whose NUMA node the matrix knows, with it set). A capture never
    creates a device (a device is billed): a GPU the store does not hold gets its links only, and
    ``unstored`` counts the NUMA nodes that were left out for that reason. ``stored``: the node's
    devices in the store (model.BUNDLE_COLUMNS["devices"])."""
    import pandas as pd

    from gpuwatch.model import BUNDLE_COLUMNS

    uuids = _uuids(parsed, listed, stored, node=node, source=source)
    links = [(node, uuids[x.gpu], uuids[x.peer], x.link, x.nvlinks) for x in parsed.links]
    topology = pd.DataFrame(links, columns=list(BUNDLE_COLUMNS["topology"])).astype({"nvlinks": "Int64"})
    rows, unstored = [], 0
    for gpu in parsed.gpus:
        if gpu.numa_node is None:
            continue
        known = stored[stored["gpu_uuid"] == uuids[gpu.index]]
        rows += [r | {"node": node, "numa_node": gpu.numa_node} for r in known.to_dict("records")]
        unstored += not len(known)
    devices = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["devices"]))
    return {"topology": topology, "devices": devices, "unstored": unstored} if rows else {
        "topology": topology, "unstored": unstored}


def _uuids(parsed: Topology, listed: dict[int, ListedGpu], stored, *, node: str, source: str) -> dict[int, str]:
    """GPU index -> UUID: the capture's own listing first, else the store's whole-GPU rows. A listed
    GPU must be the one the store holds at that index of the node, if it holds the node at all
    (a capture of another machine would move links and NUMA nodes onto the wrong GPUs)."""
    whole = stored[stored["mig_gi_id"].isna() & stored["gpu_index"].notna()]
    by_index = {int(i): u for i, u in zip(whole["gpu_index"], whole["gpu_uuid"], strict=True)}
    out = {}
    for index in sorted({g.index for g in parsed.gpus} | {x.peer for x in parsed.links}):
        uuid = listed[index].uuid if index in listed else by_index.get(index)
        if uuid is None:
            raise TopoError(f"{source}: GPU{index} has no UUID: no 'nvidia-smi -L' line for it in the file and "
                            f"no device of node {node} with gpu_index {index} in the store (load the node's "
                            "devices first, or capture 'nvidia-smi -L' with 'topo -m')")
        if len(stored) and index in listed and by_index.get(index, uuid) != uuid:
            raise TopoError(f"{source}: GPU {index} is {uuid} in the file's 'nvidia-smi -L' listing but "
                            f"{by_index[index]} on node {node} in the store: is the capture from another machine?")
        if len(stored) and uuid not in set(stored["gpu_uuid"]):
            raise TopoError(f"{source}: GPU {index} ({uuid}) is not a GPU of node {node} in the store: "
                            "is the capture from another machine?")
        out[index] = uuid
    return out
