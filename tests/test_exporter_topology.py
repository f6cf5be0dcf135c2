"""The exporter's topology series end to end: the nvml source over a FAKE pynvml with the topology
calls (tests/fakes/nvml_topology_fake.py, documented layouts), a REAL kubelet pod-resources gRPC
server on a unix socket (gpuwatch.sources.kubelet_simulated) answering List and
GetAllocatableResources, the collector, and the exposition text.

Checked: gpuwatch_gpu_link_info per ordered pair (NV18 / NV1 / NV2 / SYS labels), numa and fabric
info, the profile's node label; free GPUs = allocatable minus allocated, scrape by scrape; free
NVLink k-blocks equal a brute-force search over the kubelet's free set on the DGX-1 mesh; a driver
that cannot answer: source_up{source="topology"} 0, no link series, only certain block answers; the
kubelet's NUMA node where the driver has none; topology re-read only when the device set changes;
the simulated fleet's layouts through render_at, and "topology unknown" without them.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import combinations

import pytest

from gpuwatch.exporter import compat
from gpuwatch.exporter.collector import ExporterCollector, render_at
from gpuwatch.exporter.exposition import render
from gpuwatch.fleet import DEFAULT_START, build_fleet
from gpuwatch.sources import SourceOptions, kubelet, nvml, nvml_topology
from gpuwatch.sources.kubelet_simulated import serve
from gpuwatch.sources.simulate import allocations_at
from tests.fakes import nvml_topology_fake as fakes


def series(text: str, name: str) -> list[tuple[dict, float]]:
    out = []
    for line in text.splitlines():
        if line.startswith(name + "{"):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name):line.rindex("}")]))
            out.append((labels, float(line.rsplit(" ", 1)[1])))
    return out


def allocatable(layout: dict, *, numa: bool = True) -> dict:
    """GetAllocatableResources as a kubelet lists it: one ContainerDevices per GPU, NUMA topology."""
    return {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [g["uuid"]],
                         **({"topology": {"nodes": [{"ID": i // 4}]}} if numa else {})}
                        for i, g in enumerate(layout["gpus"])]}


def pods_holding(layout: dict, held: list[list[int]]) -> list[dict]:
    return [{"name": f"job-{n}", "namespace": "ml", "containers": [{"name": "main", "devices": [
        {"resource_name": "nvidia.com/gpu", "device_ids": [layout["gpus"][i]["uuid"] for i in gpus]}]}]}
        for n, gpus in enumerate(held)]


class Clock:
    def __init__(self):
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t

    def tick(self) -> None:
        self.t += 10.0


@pytest.fixture
def exporter(tmp_path):
    """(start(layout, held, ...) -> (collector, fake nvml, state)); state["held"] / ["layout_alloc"] may change."""
    servers, clients = [], []

    def start(layout, held=(), *, reader=None, options=None, kubelet_numa=True, fail=False):
        fake = fakes.fake_for(layout)
        source = nvml.open_source(SourceOptions(node="gpu-a"), nvml=fake)
        state = {"held": list(held), "layout": layout}
        sock = str(tmp_path / f"k{len(servers)}.sock")
        servers.append(serve(sock, pods=lambda: pods_holding(state["layout"], state["held"]), fail=fail,
                             allocatable=lambda: allocatable(state["layout"], numa=kubelet_numa)))
        client = kubelet.Client(sock)
        clients.append(client)
        clock = Clock()
        collector = ExporterCollector(
            source, allocations=lambda: client.list_allocations(timeout=5), clock=clock, interval_s=1.0,
            topology=reader or (lambda: nvml_topology.read_topology(fake, sys_root="/nonexistent")),
            allocatable=lambda: client.get_allocatable_devices(timeout=5),
            options=options or compat.options("gpuwatch"))
        return collector, fake, state, clock

    yield start
    for client in clients:
        client.close()
    for server in servers:
        server.stop()


def text_of(collector) -> str:
    return render(collector.collect()).decode()


def test_hgx_h100_series(exporter):
    layout = fakes.hgx_h100()
    collector, *_ = exporter(layout, [[0, 1, 2], [4]], options=compat.options("dcgm-exporter-4.8"))
    text = text_of(collector)
    links = series(text, "gpuwatch_gpu_link_info")
    assert len(links) == 56 and all(v == 1 for _, v in links)
    assert {(x["link"], x["nvlinks"]) for x, _ in links} == {("NV18", "18")}
    assert {(x["gpu"], x["peer_gpu"]) for x, _ in links} == {(str(i), str(j)) for i in range(8) for j in range(8) if i != j}
    first = next(x for x, _ in links if x["gpu"] == "0" and x["peer_gpu"] == "5")
    assert first == {"gpu": "0", "UUID": layout["gpus"][0]["uuid"], "Hostname": "gpu-a", "peer_gpu": "5",
                     "peer_UUID": layout["gpus"][5]["uuid"], "link": "NV18", "nvlinks": "18"}
    numa = {x["gpu"]: (x["numa_node"], x["cpu_affinity"]) for x, _ in series(text, "gpuwatch_gpu_numa_info")}
    assert numa["3"] == ("0", "0-55,112-167") and numa["4"] == ("1", "56-111,168-223") and len(numa) == 8
    assert series(text, "gpuwatch_node_free_gpus") == [({"Hostname": "gpu-a", "resource": "nvidia.com/gpu"}, 4.0)]
    blocks = {x["k"]: v for x, v in series(text, "gpuwatch_node_free_nvlink_block")}
    assert blocks == {"1": 1, "2": 1, "4": 1, "8": 0}  # GPUs 3, 5, 6, 7 free, all NV18
    assert ({"source": "topology"}, 1.0) in series(text, "gpuwatch_source_up")
    assert series(text, "gpuwatch_gpu_fabric_info") == []


def _brute_force(free: set[int], k: int) -> int:
    nv = fakes.DGX1_V100_NVLINKS
    return int(any(all(nv[i][j] for i, j in combinations(c, 2)) for c in combinations(sorted(free), k)))


def test_free_blocks_follow_the_kubelet_scrape_by_scrape(exporter):
    layout = fakes.dgx1_v100()
    collector, _, state, clock = exporter(layout)
    for held in ([], [[0, 1, 2, 3]], [[0], [5], [6]], [[1, 2], [4, 7]], [[0, 1, 2, 3, 4, 5, 6]], [list(range(8))]):
        state["held"] = held
        clock.tick()
        text = text_of(collector)
        free = set(range(8)) - {i for gpus in held for i in gpus}
        assert series(text, "gpuwatch_node_free_gpus")[0][1] == len(free)
        blocks = {int(x["k"]): v for x, v in series(text, "gpuwatch_node_free_nvlink_block")}
        assert blocks == {k: _brute_force(free, k) for k in (1, 2, 4, 8)}, held
    labels = {(x["gpu"], x["peer_gpu"]): x["link"] for x, _ in series(text, "gpuwatch_gpu_link_info")}
    assert [labels[("0", str(j))] for j in range(1, 8)] == ["NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]


def test_driver_without_topology_serves_no_links(exporter):
    layout = fakes.hgx_h100()
    layout["errors"] = {n: "NVML_ERROR_NOT_SUPPORTED" for n in (
        "nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState")}
    collector, *_ = exporter(layout, [[0, 1, 2, 3, 4]])
    text = text_of(collector)
    assert ({"source": "topology"}, 0.0) in series(text, "gpuwatch_source_up")
    assert series(text, "gpuwatch_gpu_link_info") == []
    blocks = {x["k"]: v for x, v in series(text, "gpuwatch_node_free_nvlink_block")}
    assert blocks == {"1": 1, "4": 0, "8": 0}  # 3 free: k = 2 is unknown, k >= 4 certainly not
    healthy, body = collector.health()
    assert healthy and "topology unknown" in body
    assert len(series(text, "gpuwatch_gpu_numa_info")) == 8  # NUMA answered: still served


def test_kubelet_numa_where_the_driver_has_none(exporter):
    layout = fakes.l40s_pcie()
    for gpu in layout["gpus"]:
        gpu["numa_node"] = None
    collector, *_ = exporter(layout)
    numa = {x["gpu"]: (x["numa_node"], x["cpu_affinity"]) for x, _ in series(text_of(collector), "gpuwatch_gpu_numa_info")}
    assert numa == {str(i): (str(i // 4), "0-31,64-95" if i < 4 else "32-63,96-127") for i in range(8)}


def test_no_numa_anywhere_serves_no_numa_info(exporter):
    layout = fakes.l40s_pcie()
    for gpu in layout["gpus"]:
        gpu["numa_node"] = None
    collector, *_ = exporter(layout, kubelet_numa=False)
    assert series(text_of(collector), "gpuwatch_gpu_numa_info") == []


def test_fabric_info(exporter):
    layout = fakes.hgx_h100()
    for gpu in layout["gpus"]:
        gpu["fabric"] = {"cluster_uuid": "11" * 16, "clique_id": 32766, "state": 3}
    text = text_of(exporter(layout)[0])
    fabric = series(text, "gpuwatch_gpu_fabric_info")
    assert len(fabric) == 8
    assert fabric[0][0] == {"gpu": "0", "UUID": layout["gpus"][0]["uuid"], "hostname": "gpu-a",
                            "cluster_uuid": "11111111-1111-1111-1111-111111111111", "clique_id": "32766",
                            "state": "completed"}


def test_topology_read_again_only_when_the_device_set_changes(exporter):
    layout = fakes.hgx_h100()
    reads = []
    holder = {}

    def reader():
        reads.append(1)
        return nvml_topology.read_topology(holder["fake"], sys_root="/nonexistent")
    collector, fake, _, clock = exporter(layout, reader=reader)
    holder["fake"] = fake
    for _ in range(3):
        clock.tick()
        text = text_of(collector)
    assert len(reads) == 1 and len(series(text, "gpuwatch_gpu_link_info")) == 56
    fake.scenario["gpus"].pop()  # GPU 7 gone from the node (e.g. unbound)
    clock.tick()
    text = text_of(collector)
    assert len(reads) == 2 and len(series(text, "gpuwatch_gpu_link_info")) == 42
    clock.tick()
    text_of(collector)
    assert len(reads) == 2


def test_kubelet_down_drops_only_the_free_series(exporter):
    collector, *_ = exporter(fakes.hgx_h100(), fail=True)
    text = text_of(collector)
    assert series(text, "gpuwatch_node_free_gpus") == [] and series(text, "gpuwatch_node_free_nvlink_block") == []
    assert len(series(text, "gpuwatch_gpu_link_info")) == 56
    assert ({"source": "kubelet"}, 0.0) in series(text, "gpuwatch_source_up")


def test_simulated_fleet_layouts_through_render_at():
    """The simulate source serves Fleet.topology rows (here the DGX-1 mesh written onto one node's
    GPUs, with NUMA nodes) with the kubelet's free set at that instant."""
    fleet = build_fleet(gpus=40, seed=0)
    node, t = "gpu-node-003", DEFAULT_START + 600.0
    gpus = sorted((d for d in fleet.devices if d.node == node), key=lambda d: d.gpu_index)
    nv = fakes.DGX1_V100_NVLINKS
    rows = tuple({"node": node, "gpu_uuid": a.gpu_uuid, "peer_gpu_uuid": b.gpu_uuid,
                  "link": "NV" if nv[i][j] else "SYS", "nvlinks": nv[i][j] or None}
                 for (i, a), (j, b) in combinations(enumerate(gpus), 2))
    devices = tuple(replace(d, numa_node=d.gpu_index // 4) if d.node == node else d for d in fleet.devices)
    with_layout = replace(fleet, topology=rows, devices=devices)
    text = render_at(with_layout, t, node=node)
    assert len(series(text, "gpuwatch_gpu_link_info")) == 56
    assert {x["numa_node"] for x, _ in series(text, "gpuwatch_gpu_numa_info")} == {"0", "1"}
    held = {a.device_id for a in allocations_at(fleet, t, node=node)}
    free = {d.gpu_index for d in gpus if d.gpu_uuid not in held}
    assert free, "fixture time should leave GPUs free on the node"
    blocks = {int(x["k"]): v for x, v in series(text, "gpuwatch_node_free_nvlink_block")}
    assert blocks == {k: _brute_force(free, k) for k in (1, 2, 4, 8)}
    assert ({"source": "topology"}, 1.0) in series(text, "gpuwatch_source_up")
    bare = render_at(fleet, t, node=node)  # no layouts: unknown, nothing made up
    assert ({"source": "topology"}, 0.0) in series(bare, "gpuwatch_source_up")
    assert series(bare, "gpuwatch_gpu_link_info") == [] and series(bare, "gpuwatch_gpu_numa_info") == []
    assert series(bare, "gpuwatch_node_free_gpus")[0][1] == len(free)
