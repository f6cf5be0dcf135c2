"""GPU topology read through NVML, at the NVML boundary: a FAKE pynvml (tests/fakes/fake_pynvml.py)
with the topology calls added by tests/fakes/nvml_topology_fake.py in pynvml's real call shapes
(ctypes arrays, ``nvmlPciInfo_t``, the fabric structs filled through ``byref``, NVMLError subclasses).
Layouts come from NVIDIA's documentation (each fake layout's docstring names its source).

Checked: HGX/DGX H100 (NVSwitch, NV18, NUMA 0/1, CPU lists), DGX A100 (NV12), DGX-1 V100 (direct
NV1/NV2), NV<n> for bridged pairs of any n, an 8 x L40S PCIe server (PIX/PXB/NODE/SYS, no NVLink);
NVLink state alone never makes a pair NV (P2P status decides); a switch link down lowers that
GPU's pairs; a driver answering NOT_SUPPORTED gives an unknown topology (no links); NUMA from NVML's
memory affinity, else sysfs; fabric cliques only with a non-zero cluster UUID; read() is plain data.
"""

from __future__ import annotations

import json

import pynvml
import pytest

from gpuwatch import topology
from gpuwatch.sources import nvml_topology
from tests.fakes import nvml_topology_fake as fakes


def _read(layout: dict, sys_root: str = "/nonexistent"):
    fake = fakes.fake_for(layout)
    fake.nvmlInit()
    return nvml_topology.read_topology(fake, sys_root=sys_root)


def _matrix(topo, layout) -> list[list[str]]:
    """topo -m style: the label of each ordered pair, by GPU index ("X" on the diagonal)."""
    uuids = [g["uuid"] for g in layout["gpus"]]
    labels = {(a, b): topology.label(link, n) for a, b, link, n in topo.links}
    return [["X" if a == b else labels.get((a, b), "?") for b in uuids] for a in uuids]


def test_levels_map_nvml_constants_to_link_classes():
    assert {nvml_topology.LEVELS[getattr(pynvml, f"NVML_TOPOLOGY_{n}")] for n in ("INTERNAL", "SINGLE")} == {"PIX"}
    assert [nvml_topology.LEVELS[getattr(pynvml, f"NVML_TOPOLOGY_{n}")] for n in
            ("MULTIPLE", "HOSTBRIDGE", "NODE", "SYSTEM")] == ["PXB", "PHB", "NODE", "SYS"]
    assert nvml_topology.P2P_CAPS_INDEX_NVLINK == pynvml.NVML_P2P_CAPS_INDEX_NVLINK
    assert nvml_topology.DEVICE_TYPE_SWITCH == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH


def test_hgx_h100_all_pairs_nv18_numa_by_socket():
    layout = fakes.hgx_h100()
    topo = _read(layout)
    assert topo.ok and topo.error is None
    assert len(topo.links) == 8 * 7  # one row per ordered pair
    assert {(link, n) for _, _, link, n in topo.links} == {("NV", 18)}
    uuids = [g["uuid"] for g in layout["gpus"]]
    assert [topo.numa[u] for u in uuids] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert topo.cpu_affinity[uuids[0]] == "0-55,112-167" and topo.cpu_affinity[uuids[7]] == "56-111,168-223"
    assert topo.gpus == {u: i for i, u in enumerate(uuids)}
    assert topo.fabric == {}  # no multi-node NVLink domain on an HGX board


def test_a100_hgx_is_nv12():
    assert {(link, n) for _, _, link, n in _read(fakes.a100_hgx()).links} == {("NV", 12)}


def test_dgx1_direct_links_counted_per_pair():
    layout = fakes.dgx1_v100()
    rows = _matrix(_read(layout), layout)
    want = [["X" if i == j else f"NV{n}" if n else ("NODE" if i // 4 == j // 4 else "SYS")
             for j, n in enumerate(row)] for i, row in enumerate(fakes.DGX1_V100_NVLINKS)]
    assert rows == want
    assert rows[0] == ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]


@pytest.mark.parametrize("n", [4, 6, 12, 18])
def test_any_bonded_link_count(n):
    topo = _read(fakes.bridged_pair(n))
    assert [(link, count) for _, _, link, count in topo.links] == [("NV", n), ("NV", n)]
    assert {topology.label(link, count) for _, _, link, count in topo.links} == {f"NV{n}"}


def test_l40s_pcie_classes_and_no_nvlink():
    layout = fakes.l40s_pcie()
    rows = _matrix(_read(layout), layout)
    assert rows[0] == ["X", "PIX", "PXB", "PXB", "SYS", "SYS", "SYS", "SYS"]
    assert rows[5] == ["SYS", "SYS", "SYS", "SYS", "PIX", "X", "NODE", "NODE"]
    assert not any(label.startswith("NV") for row in rows for label in row)


def test_nvlink_state_alone_never_makes_a_pair_nv():
    """An NVSwitch board whose Fabric Manager is down: every local link is up, P2P over NVLink is not."""
    layout = fakes.hgx_h100(fabric_manager=False)
    topo = _read(layout)
    assert all(g["nvlinks"] for g in nvml_topology.read(fakes.fake_for(layout))["gpus"])  # links are up
    assert {link for _, _, link, _ in topo.links} == {"NODE", "SYS"}
    assert all(n is None for *_, n in topo.links)


def test_a_switch_link_down_limits_that_gpus_pairs():
    layout = fakes.hgx_h100()
    layout["gpus"][3]["nvlinks"][7] = None  # one of GPU 3's 18 links is down
    topo = _read(layout)
    gpu3 = layout["gpus"][3]["uuid"]
    assert {n for a, b, _, n in topo.links if gpu3 in (a, b)} == {17}
    assert {n for a, b, _, n in topo.links if gpu3 not in (a, b)} == {18}


def test_driver_that_cannot_answer_gives_unknown_topology_not_a_made_up_link():
    layout = fakes.hgx_h100()
    layout["errors"] = {name: "NVML_ERROR_NOT_SUPPORTED" for name in (
        "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState")}
    topo = _read(layout)
    assert not topo.ok and topo.links == ()
    assert topo.error.startswith("topology unknown")
    assert topo.numa[layout["gpus"][5]["uuid"]] == 1  # what the driver did answer is kept


def test_missing_function_leaves_only_that_fact_out():
    layout = fakes.l40s_pcie()
    layout["errors"] = {"nvmlDeviceGetCpuAffinity": "NVML_ERROR_FUNCTION_NOT_FOUND"}
    topo = _read(layout)
    assert topo.ok and len(topo.links) == 56 and topo.cpu_affinity == {}


def test_numa_falls_back_to_sysfs_then_unknown(tmp_path):
    layout = fakes.l40s_pcie()
    for gpu in layout["gpus"]:
        gpu["numa_node"] = None  # NVML's memory affinity: NOT_SUPPORTED
    for i, value in ((0, "1\n"), (1, "-1\n")):  # sysfs: node 1; -1 = no NUMA information
        bus = layout["gpus"][i]["pci_bus_id"].lower().replace("00000000:", "0000:")
        (tmp_path / "bus" / "pci" / "devices" / bus).mkdir(parents=True)
        (tmp_path / "bus" / "pci" / "devices" / bus / "numa_node").write_text(value)
    topo = _read(layout, sys_root=str(tmp_path))
    uuids = [g["uuid"] for g in layout["gpus"]]
    assert topo.numa[uuids[0]] == 1
    assert topo.numa[uuids[1]] is None and topo.numa[uuids[2]] is None


CLUSTER = "9d4f6a1c2b3e4f5a8b7c6d5e4f3a2b1c"


def test_fabric_clique_only_with_a_cluster():
    layout = fakes.hgx_h100()
    layout["gpus"][0]["fabric"] = {"cluster_uuid": CLUSTER, "clique_id": 5, "state": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED}
    # what a real single-node H100 reports (captured): Completed, Success, clique 0, cluster all zero
    layout["gpus"][1]["fabric"] = {"cluster_uuid": "0" * 32, "clique_id": 0, "state": pynvml.NVML_GPU_FABRIC_STATE_COMPLETED}
    topo = _read(layout)
    assert topo.fabric == {layout["gpus"][0]["uuid"]: ("9d4f6a1c-2b3e-4f5a-8b7c-6d5e4f3a2b1c", "5", "completed")}


def test_fabric_from_the_older_call_when_the_versioned_one_is_missing():
    layout = fakes.hgx_h100()
    layout["gpus"][2]["fabric"] = {"cluster_uuid": CLUSTER, "clique_id": 7, "state": pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS}
    layout["errors"] = {"nvmlDeviceGetGpuFabricInfoV": "NVML_ERROR_FUNCTION_NOT_FOUND"}
    assert _read(layout).fabric[layout["gpus"][2]["uuid"]][1:] == ("7", "in_progress")


def test_read_is_plain_data_and_parse_is_pure():
    layout = fakes.dgx1_v100()
    raw = nvml_topology.read(fakes.fake_for(layout), sys_root="/nonexistent")
    again = json.loads(json.dumps(raw))
    assert nvml_topology.parse(again) == nvml_topology.parse(raw)
    assert raw["pairs"][0]["p2p_nvlink"] == pynvml.NVML_P2P_STATUS_OK


def test_a_gpu_that_cannot_be_read_is_left_out():
    layout = fakes.hgx_h100()
    fake = fakes.fake_for(layout)
    fake.scenario["gpus"][6]["lost"] = True
    topo = nvml_topology.read_topology(fake, sys_root="/nonexistent")
    lost = layout["gpus"][6]["uuid"]
    assert topo.ok and lost not in topo.gpus and len(topo.links) == 7 * 6
    assert all(lost not in (a, b) for a, b, *_ in topo.links)


def test_nvml_failure_is_unknown_not_an_exception():
    fake = fakes.fake_for(fakes.hgx_h100())
    fake.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED))
    topo = nvml_topology.read_topology(fake)
    assert not topo.ok and "Uninitialized" in topo.error
