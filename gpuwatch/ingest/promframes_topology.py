"""gpuwatch's topology info series -> the bundle's ``topology`` frame and the devices' ``numa_node`` /
``nvlink_clique`` columns (docs/architecture.md#topology).

Series read (static info series, value 1, the exporter's node label ``hostname`` or ``Hostname``,
``UUID`` or ``uuid``, as everywhere in ingest):
- ``gpuwatch_gpu_link_info{gpu, UUID, peer_gpu, peer_UUID, link, nvlinks}``: one row per ordered
  pair; ``link`` is a label of gpuwatch/topology.py (``NV18``, ``PIX`` ... ``SYS``; a bare ``NV`` is
  an NVLink of unknown width, its count then from ``nvlinks`` if given). Any other link label is an
  error naming the series and the label: a guessed link would be a made-up topology.
- ``gpuwatch_gpu_numa_info{gpu, UUID, numa_node, cpu_affinity}`` -> devices.numa_node;
- ``gpuwatch_gpu_fabric_info{gpu, UUID, cluster_uuid, clique_id, state}`` -> devices.nvlink_clique
  ``<cluster_uuid>/<clique_id>``, only once the fabric is set up (``state`` empty or completed) and
  for a real cluster: an all-zero cluster UUID is no multi-node NVLink domain (NULL, never a clique
  shared by every node).

A series whose value is not 1 at its last sample (the info went away) is not read. Where the latest
series of one GPU (or pair) disagree, the better link is kept (as staging does) and a NUMA node or
clique is NULL (unknown), with a note.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import numpy as np

from gpuwatch import topology
from gpuwatch.ingest.series import Series, first, node_of, nones
from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.units import DataError

LINK, NUMA, FABRIC = "gpuwatch_gpu_link_info", "gpuwatch_gpu_numa_info", "gpuwatch_gpu_fabric_info"
INFO_NAMES: tuple[str, ...] = (LINK, NUMA, FABRIC)
_ZERO_UUID = re.compile(r"^[0-]+$")


class TopologySeriesError(DataError):
    """A topology info series that cannot be read faithfully (the message names series and label)."""


def topology_frame(series: Iterable[Series]):
    """The ``topology`` frame (model.BUNDLE_COLUMNS): one row per (node, gpu, peer) on a link series."""
    import pandas as pd

    latest: dict[tuple, tuple[float, int, int | None]] = {}
    for s, at in _current(series, LINK):
        node, uuid, peer = node_of(s.labels), first(s.labels, "UUID", "uuid"), first(s.labels, "peer_UUID", "peer_uuid")
        if not (node and uuid and peer) or uuid == peer:
            continue
        link, nvlinks = link_of(s)
        candidate = (at, -topology.rank(link), nvlinks or 0)
        if (node, uuid, peer) not in latest or candidate > latest[(node, uuid, peer)][:3]:
            latest[(node, uuid, peer)] = (*candidate, link, nvlinks)
    rows = [(node, uuid, peer, link, nvlinks) for (node, uuid, peer), (*_, link, nvlinks) in sorted(latest.items())]
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["topology"])).astype({"nvlinks": "Int64"})
    return nones(frame, "node", "gpu_uuid", "peer_gpu_uuid", "link")


def link_of(s: Series) -> tuple[str, int | None]:
    """(link class, nvlinks) from a link series' labels; TopologySeriesError for anything else."""
    text, count = (s.labels.get("link") or "").strip(), (s.labels.get("nvlinks") or "").strip()
    if count and not count.isdigit():
        raise TopologySeriesError(f"{_name(s)}: nvlinks={count!r} is not an NVLink count")
    if text == "NV":  # an NVLink of unknown width (topology.label("NV", None))
        return "NV", int(count) if count and int(count) else None
    try:
        return topology.parse_label(text)
    except ValueError as exc:
        raise TopologySeriesError(f"{_name(s)}: link={text!r} is not a GPU link "
                                  f"(NV<n>, {', '.join(topology.PCIE_LINKS)})") from exc


def device_topology(series: Iterable[Series], notes: list[str]) -> dict[tuple[str, str], dict]:
    """(node, gpu_uuid) -> {numa_node, nvlink_clique} for every GPU a numa or fabric series names."""
    series = list(series)
    found: dict[tuple[str, str], dict] = {}
    for column, name, value_of in (("numa_node", NUMA, _numa), ("nvlink_clique", FABRIC, _clique)):
        for key, value in _latest(series, name, value_of, column, notes).items():
            found.setdefault(key, {"numa_node": None, "nvlink_clique": None})[column] = value
    return found


def with_topology(devices, series: Iterable[Series], notes: list[str]):
    """``devices`` with numa_node / nvlink_clique filled from the info series (every row of a GPU, its
    MIG instances too: they sit on the same board). GPUs seen only on info series get no row."""
    import pandas as pd

    found = device_topology(series, notes)
    if devices.empty or not found:
        return devices
    out = devices.copy()
    keys = list(zip(out["node"], out["gpu_uuid"], strict=True))
    for column in ("numa_node", "nvlink_clique"):
        known = [found.get(k, {}).get(column) for k in keys]
        merged = [new if new is not None else old for new, old in zip(known, out[column], strict=True)]
        out[column] = pd.Series(merged, index=out.index, dtype=object)
    return nones(out.astype({"numa_node": "Int64"}), "nvlink_clique")


def _current(series: Iterable[Series], name: str):
    """(series, time of its last sample) for ``name`` where that sample is 1 (the info holds)."""
    for s in (s for s in series if s.name == name):
        ok = np.isfinite(s.values)
        if not ok.any():
            continue
        last = int(np.argmax(np.where(ok, s.ts, -np.inf)))
        if s.values[last] == 1:
            yield s, float(s.ts[last])


def _latest(series: list[Series], name: str, value_of, column: str, notes: list[str]) -> dict:
    """(node, gpu_uuid) -> the value its latest series says; None where the latest disagree."""
    at: dict[tuple, tuple[float, set]] = {}
    for s, t in _current(series, name):
        node, uuid = node_of(s.labels), first(s.labels, "UUID", "uuid")
        if not (node and uuid):
            continue
        value = value_of(s)
        before = at.get((node, uuid))
        if before is None or t > before[0]:
            at[(node, uuid)] = (t, {value})
        elif t == before[0]:
            before[1].add(value)
    out = {}
    for key, (_, values) in at.items():
        if len(values) > 1:
            notes.append(f"{name}: {key[0]} {key[1]} has several {column} values {sorted(map(str, values))}: unknown")
        out[key] = next(iter(values)) if len(values) == 1 else None
    return out


def _numa(s: Series) -> int | None:
    text = (s.labels.get("numa_node") or "").strip()
    if not text:
        return None
    if not text.isdigit():
        raise TopologySeriesError(f"{_name(s)}: numa_node={text!r} is not a NUMA node number")
    return int(text)


def _clique(s: Series) -> str | None:
    cluster, clique = (s.labels.get("cluster_uuid") or "").strip(), (s.labels.get("clique_id") or "").strip()
    state = (s.labels.get("state") or "").strip().lower()
    if not cluster or not clique or _ZERO_UUID.match(cluster) or (state and "complete" not in state):
        return None
    return f"{cluster}/{clique}"


def _name(s: Series) -> str:
    labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
    return f"{s.name}{{{labels}}}"
