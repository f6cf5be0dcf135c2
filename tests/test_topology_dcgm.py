"""GPU topology read through DCGM, at the DCGM boundary: the stand-in bindings (tests/fakes/dcgm, a
FAKE with DCGM's real module names, constants and ``c_dcgmDeviceTopology_v2`` struct) put on the path
as a real install is. Layouts are the documented ones of tests/fakes/nvml_topology_fake.py (DGX H100,
DGX-1 V100, 8 x L40S) written as DCGM path bitmasks.

Checked: PCIe bits and NVLINK<n> bits (n = 1..36) decoded; NV18 on DGX H100, NV1/NV2 on DGX-1,
PIX/PXB/NODE/SYS on L40S; CPU affinity from cpuAffinityMask; NUMA from sysfs; a hostengine that
cannot answer gives an unknown topology; ``dcgmSelectGpusByTopology`` as an oracle agrees with the
exact block search on every free set of the DGX-1 mesh.
"""

from __future__ import annotations

from itertools import combinations

import pytest

from gpuwatch import topology
from gpuwatch.sources import dcgm, dcgm_topology
from tests.conftest import ROOT
from tests.fakes import nvml_topology_fake as layouts

FAKES = str(ROOT / "tests" / "fakes" / "dcgm")
PCI_BITS = {"INTERNAL": 0x1, "SINGLE": 0x2, "MULTIPLE": 0x4, "HOSTBRIDGE": 0x8, "NODE": 0x10, "SYSTEM": 0x20}


@pytest.fixture
def bindings():
    mods = dcgm.load_bindings(FAKES)
    import _fake_state

    return mods, _fake_state


def _nvlinks(layout: dict, i: int, j: int) -> int:
    """Bonded links between GPUs i and j of a fake NVML layout (through switches: all of i's)."""
    links = [x for x in layout["gpus"][i].get("nvlinks", []) if x]
    return sum(1 for x in links if x.get("gpu") == j) or sum(1 for x in links if "switch" in x)


def scenario(layout: dict) -> dict:
    """The DCGM scenario of a layout: discovery identities and per-GPU topology paths."""
    gpus = [{"gpu_id": i, "uuid": g["uuid"], "pci_bus_id": g["pci_bus_id"], "model": g["name"]}
            for i, g in enumerate(layout["gpus"])]
    topo = {}
    for i, g in enumerate(layout["gpus"]):
        paths = {}
        for j in range(len(layout["gpus"])):
            if j != i:
                n = _nvlinks(layout, i, j)
                paths[str(j)] = PCI_BITS[layout["pcie"][i][j]] | (0x100 << (n - 1) if n else 0)
        topo[str(i)] = {"cpus": g.get("cpus"), "paths": paths}
    return {"gpus": gpus, "values": {}, "topology": topo}


def _read(bindings, layout, **kw):
    mods, state = bindings
    state.load(scenario(layout) | kw)
    handle = dcgm.connect(mods, None)
    source = dcgm.DcgmSource(mods, handle, options=dcgm.SourceOptions(node="n"))
    return dcgm_topology.read_source(source, sys_root="/nonexistent")


def test_path_bits_decode(bindings):
    mods, _ = bindings
    structs = mods.dcgm_structs
    for n in range(1, 37):
        bit = getattr(structs, f"DCGM_TOPOLOGY_NVLINK{n}")
        assert dcgm_topology.path_link(bit | structs.DCGM_TOPOLOGY_CPU) == ("NV", n)
    assert dcgm_topology.path_link(structs.DCGM_TOPOLOGY_BOARD) == ("PIX", None)
    assert dcgm_topology.path_link(structs.DCGM_TOPOLOGY_HOSTBRIDGE) == ("PHB", None)
    assert dcgm_topology.path_link(structs.DCGM_TOPOLOGY_SYSTEM) == ("SYS", None)
    assert dcgm_topology.path_link(0) is None  # DCGM_TOPOLOGY_UNINITIALIZED: unknown, not guessed


def test_dgx_h100_nv18_with_cpu_affinity(bindings):
    layout = layouts.hgx_h100()
    topo = _read(bindings, layout)
    assert topo.ok and len(topo.links) == 56
    assert {topology.label(link, n) for *_, link, n in topo.links} == {"NV18"}
    assert topo.cpu_affinity[layout["gpus"][4]["uuid"]] == "56-111,168-223"
    assert set(topo.numa.values()) == {None}  # DCGM gives no NUMA node; no sysfs here: unknown


def test_dgx1_and_l40s_matrices(bindings):
    layout = layouts.dgx1_v100()
    labels = {(a, b): topology.label(link, n) for a, b, link, n in _read(bindings, layout).links}
    uuids = [g["uuid"] for g in layout["gpus"]]
    assert [labels[(uuids[0], u)] for u in uuids[1:]] == ["NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    layout = layouts.l40s_pcie()
    labels = {(a, b): topology.label(link, n) for a, b, link, n in _read(bindings, layout).links}
    uuids = [g["uuid"] for g in layout["gpus"]]
    assert [labels[(uuids[4], u)] for u in uuids if u != uuids[4]] == ["SYS"] * 4 + ["PIX", "NODE", "NODE"]
    assert labels[(uuids[0], uuids[2])] == "PXB"


def test_numa_from_sysfs(bindings, tmp_path):
    mods, state = bindings
    layout = layouts.l40s_pcie()
    state.load(scenario(layout))
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:2a:00.0"  # GPU 1
    dev.mkdir(parents=True)
    (dev / "numa_node").write_text("0\n")
    gpus = {i: (g["uuid"], g["pci_bus_id"]) for i, g in enumerate(layout["gpus"])}
    topo = dcgm_topology.read_topology(mods, 1, gpus, sys_root=str(tmp_path))
    assert topo.numa[layout["gpus"][1]["uuid"]] == 0 and topo.numa[layout["gpus"][0]["uuid"]] is None


def test_hostengine_without_topology_is_unknown(bindings):
    mods, _ = bindings
    topo = _read(bindings, layouts.hgx_h100(), topology_error=mods.dcgm_structs.DCGM_ST_NOT_SUPPORTED)
    assert not topo.ok and topo.links == () and "DCGM answered no GPU pair" in topo.error


def test_not_connected_is_unknown(bindings):
    mods, state = bindings
    state.load(scenario(layouts.hgx_h100()))
    source = dcgm.DcgmSource(mods, None, options=dcgm.SourceOptions(node="n"))
    assert dcgm_topology.read_source(source).error == "topology unknown: DCGM is not connected"


def test_select_gpus_by_topology_agrees_with_the_exact_search(bindings):
    """Oracle: DCGM's pick of k free GPUs is all-NVLink exactly when the largest free NVLink block has k."""
    mods, state = bindings
    layout = layouts.dgx1_v100()
    state.load(scenario(layout))
    topo = _read(bindings, layout)
    uuids = [g["uuid"] for g in layout["gpus"]]
    grid = topology.Layout.build(uuids, topo.links)
    checked = 0
    for size in range(1, 9):
        for free in combinations(range(8), size):
            largest = grid.largest_block(sum(1 << i for i in free)).bit_count()
            for k in (2, 4):
                chosen = dcgm_topology.select_gpus(mods, 1, free, k)
                if chosen is None:
                    assert size < k
                    continue
                assert set(chosen) <= set(free) and len(chosen) == k
                all_nv = grid.worst_rank(sum(1 << i for i in chosen)) == topology.NV_RANK
                assert all_nv == (largest >= k), (free, k, chosen)
                checked += 1
    assert checked > 300
    assert dcgm_topology.select_gpus(mods, 1, [], 1) is None  # an empty mask would mean "all GPUs"
