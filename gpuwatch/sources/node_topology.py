"""The record every topology reader returns (nvml_topology, dcgm_topology, simulate), and the small
helpers they share: CPU masks as Linux CPU lists, PCI bus ids, the NUMA node sysfs reports.

Topology is static (docs/architecture.md#topology): the exporter reads it at start and again when the
set of devices changes. A fact the driver cannot give is left out (unknown), never guessed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

Link = tuple[str, str, str, int | None]  # (gpu uuid, peer gpu uuid, link class, bonded NVLinks)


@dataclass(frozen=True)
class NodeTopology:
    """One node's GPU topology as its driver answered.

    ``gpus``: uuid -> GPU index of every whole GPU read; ``links``: one row per ORDERED pair of GPUs
    whose link is known (``link`` one of gpuwatch.topology.LINKS, ``nvlinks`` the bonded NVLink count
    or None); ``numa``: uuid -> NUMA node the GPU is attached to (None unknown); ``cpu_affinity``:
    uuid -> its CPUs as a Linux CPU list ("0-55,112-167"), only where known; ``fabric``: uuid ->
    (cluster uuid, clique id, state) for GPUs in a multi-node NVLink domain. ``ok`` False: the driver
    could not answer the GPU pairs' topology (``error`` says why) and ``links`` is empty."""

    gpus: Mapping[str, int] = field(default_factory=dict)
    links: tuple[Link, ...] = ()
    numa: Mapping[str, int | None] = field(default_factory=dict)
    cpu_affinity: Mapping[str, str] = field(default_factory=dict)
    fabric: Mapping[str, tuple[str, str, str]] = field(default_factory=dict)
    ok: bool = True
    error: str | None = None


def unknown(error: str, **known) -> NodeTopology:
    """A topology whose GPU pairs are unknown (``known``: the facts that were read, e.g. numa)."""
    return NodeTopology(**known, links=(), ok=False, error=error)


def both_directions(pairs: Iterable[Link]) -> tuple[Link, ...]:
    """Each unordered pair's row and its mirror, sorted (one row per ordered pair)."""
    out = {}
    for gpu, peer, link, nvlinks in pairs:
        out[(gpu, peer)] = (gpu, peer, link, nvlinks)
        out[(peer, gpu)] = (peer, gpu, link, nvlinks)
    return tuple(out[key] for key in sorted(out))


def cpu_list(words: Iterable[int], *, bits: int = 64) -> str | None:
    """A CPU bitmask (``bits``-bit words, lowest CPUs first) -> "0-55,112-167"; None when empty."""
    cpus = [w * bits + b for w, word in enumerate(words) for b in range(bits) if int(word) >> b & 1]
    if not cpus:
        return None
    ranges, start, prev = [], cpus[0], cpus[0]
    for cpu in cpus[1:]:
        if cpu != prev + 1:
            ranges.append(_span(start, prev))
            start = cpu
        prev = cpu
    ranges.append(_span(start, prev))
    return ",".join(ranges)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def single_node(words: Iterable[int], *, bits: int = 64) -> int | None:
    """The one NUMA node set in a node mask; None when none or several are set."""
    nodes = [w * bits + b for w, word in enumerate(words) for b in range(bits) if int(word) >> b & 1]
    return nodes[0] if len(nodes) == 1 else None


def bus_key(bus_id: str | bytes | None) -> str | None:
    """A PCI bus id in sysfs' form ("0000:18:00.0"): NVML's 8-digit domain ("00000000:18:00.0")
    and DCGM's forms compare equal after this."""
    if isinstance(bus_id, bytes):
        bus_id = bus_id.decode(errors="replace")
    bus_id = (bus_id or "").strip().rstrip("\x00").lower()
    domain, sep, rest = bus_id.partition(":")
    if not sep or not rest:
        return None
    try:
        return f"{int(domain, 16):04x}:{rest}"
    except ValueError:
        return None


def sysfs_numa_node(bus_id: str | bytes | None, *, sys_root: str = "/sys") -> int | None:
    """``<sys_root>/bus/pci/devices/<bus id>/numa_node`` (the node the device's root port hangs off);
    None when absent, unreadable or -1 (no NUMA information)."""
    key = bus_key(bus_id)
    if key is None:
        return None
    try:
        with open(os.path.join(sys_root, "bus", "pci", "devices", key, "numa_node")) as f:
            node = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return node if node >= 0 else None
