"""``nvidia-smi topo -m`` text -> the GPU link matrix, NUMA node and CPU affinity of one node.

The matrix is tab-separated: a header row of device columns (``GPU0`` ... ``GPUn``, ``NIC0`` ...)
followed by ``CPU Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``; one row per
device; ``X`` on the diagonal. Between two GPUs a cell is ``NV<n>`` (a bonded set of n NVLinks, any
n: NV1, NV4, NV6, NV12, NV18 ...) or a PCIe path class, best to worst: PIX, PXB, PHB, NODE, SYS.
Headers may carry terminal escapes (bold/underline); they are stripped. Anything else in a GPU
pair cell is an error naming the line and column: a guessed link would be a made-up topology.

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

from gpuwatch.units import DataError

PCIE_LINKS = ("PIX", "PXB", "PHB", "NODE", "SYS")  # best to worst, per nvidia-smi's legend
_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
_GPU = re.compile(r"^GPU(\d+)$")
_NVLINK = re.compile(r"^NV(\d+)$")
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_LISTED = re.compile(r"^GPU (\d+): (.+?) \(UUID: (GPU-[^)\s]+)\)$")


class TopoError(DataError):
    """The text is not a ``nvidia-smi topo -m`` matrix (the message names the line and column)."""


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
    """Parse the matrix out of ``text`` (a bare ``topo -m`` output or a capture that contains one)."""
    lines = [_ESCAPE.sub("", line).rstrip("\n") for line in text.splitlines()]
    at = _header_line(lines, source)
    columns = [cell.strip() for cell in lines[at].split("\t")]
    gpus, links = [], []
    for number, line in enumerate(lines[at + 1:], start=at + 2):
        cells = line.split("\t")
        if not line.strip() or line.startswith("Legend"):
            break
        if not _GPU.match(cells[0].strip()):
            continue
        gpu, row_links = _row(cells, columns, where=f"{source}: line {number}")
        gpus.append(gpu)
        links.extend(row_links)
    return Topology(tuple(gpus), tuple(links))


def _header_line(lines: list[str], source: str) -> int:
    for at, line in enumerate(lines):
        cells = [cell.strip() for cell in line.split("\t")]
        if len(cells) > 1 and cells[0] == "" and "GPU0" in cells:
            return at
    raise TopoError(f"{source}: no 'nvidia-smi topo -m' matrix (a tab-separated header with GPU0)")


def _row(cells: list[str], columns: list[str], *, where: str) -> tuple[TopoGpu, list[TopoLink]]:
    """Device cells are positional; the affinity cells are read in order, since nvidia-smi pads
    the NUMA Affinity cell with an extra tab (``0-19\t0\t\tN/A`` under three headers)."""
    index = int(_GPU.match(cells[0].strip())[1])
    devices = [c for c in columns[1:] if c not in _AFFINITY]
    links = []
    for position, column in enumerate(devices, start=1):
        peer = _GPU.match(column)
        if peer is None or int(peer[1]) == index or position >= len(cells):
            continue
        links.append(_link(index, int(peer[1]), cells[position].strip(), where=f"{where}, column {column}"))
    rest = [cell.strip() for cell in cells[len(devices) + 1:]] + ["", ""]
    cpu, numa = (rest[0], rest[1]) if "CPU Affinity" in columns else (None, rest[0])
    return TopoGpu(index, _known(cpu), _numa(numa if "NUMA Affinity" in columns else None)), links


def _link(gpu: int, peer: int, value: str, *, where: str) -> TopoLink:
    if match := _NVLINK.match(value):
        return TopoLink(gpu, peer, "NV", int(match[1]))
    if value in PCIE_LINKS:
        return TopoLink(gpu, peer, value, None)
    raise TopoError(f"{where}: {value!r} is not a link (NV<n>, {', '.join(PCIE_LINKS)})")


def _known(value: str | None) -> str | None:
    return None if value in (None, "", "N/A") else value


def _numa(value: str | None) -> int | None:
    value = _known(value)
    if value is None:
        return None
    if not value.isdigit():  # a GPU spanning NUMA nodes prints e.g. "0-1": not one node, so unknown
        return None
    return int(value)


@dataclass(frozen=True)
class ListedGpu:
    """One line of ``nvidia-smi -L``: index, model name (as NVML names it), UUID."""

    index: int
    model: str
    uuid: str


def has_matrix(text: str) -> bool:
    """Whether ``text`` holds a ``topo -m`` matrix (a /metrics page or a bundle file never does)."""
    try:
        _header_line([_ESCAPE.sub("", line) for line in text.splitlines()], "")
    except TopoError:
        return False
    return True


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
