"""``nvidia-smi topo -m`` text -> the GPU link matrix, NUMA node and CPU affinity of one node.

The matrix is tab-separated: a header row of device columns (``GPU0`` ... ``GPUn``, ``NIC0`` ...)
followed by ``CPU Affinity``, ``NUMA Affinity`` and, on newer drivers, ``GPU NUMA ID``; one row per
device; ``X`` on the diagonal. Between two GPUs a cell is ``NV<n>`` (a bonded set of n NVLinks, any
n: NV1, NV4, NV6, NV12, NV18 ...) or a PCIe path class, best to worst: PIX, PXB, PHB, NODE, SYS.
Headers may carry terminal escapes (bold/underline); they are stripped. Anything else in a GPU
pair cell is an error naming the line and column: a guessed link would be a made-up topology.
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
