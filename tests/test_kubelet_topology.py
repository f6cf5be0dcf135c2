"""The kubelet's allocatable devices with their NUMA topology, and the free set (allocatable minus
allocated), against a REAL pod-resources gRPC server on a unix socket (gpuwatch.sources.
kubelet_simulated plays the kubelet, as in tests/test_kubelet.py).

Checked: GetAllocatableResources read per device with ``topology.nodes[].ID`` (one ContainerDevices per
device, as the kubelet lists them; none reported = ``()``); other resources ignored; free = allocatable
minus List, a time-sliced GPU free only with no replica held; the simulated fleet's allocatable answer
carries each device's NUMA node when the fleet knows it and covers every allocation.
"""

from __future__ import annotations

from dataclasses import replace

from gpuwatch.fleet import build_fleet
from gpuwatch.model import Allocation
from gpuwatch.sources import kubelet
from gpuwatch.sources.kubelet_simulated import allocatable_from_fleet, pods_from_fleet, serve

GPUS = [f"GPU-{i:08x}-5a5a-4b4b-8c8c-0123456789ab" for i in range(4)]
SHARED = "GPU-7f7f7f7f-5a5a-4b4b-8c8c-0123456789ab"
MIG = "MIG-0d0d0d0d-1e1e-2f2f-3a3a-4b4b4b4b4b4b"

ALLOCATABLE = {"devices": [
    *[{"resource_name": "nvidia.com/gpu", "device_ids": [g], "topology": {"nodes": [{"ID": i // 2}]}}
      for i, g in enumerate(GPUS)],
    {"resource_name": "nvidia.com/gpu.shared", "device_ids": [f"{SHARED}::{n}" for n in range(4)],
     "topology": {"nodes": [{"ID": 1}]}},
    {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [MIG]},  # no topology reported
    {"resource_name": "example.com/nic", "device_ids": ["nic0"], "topology": {"nodes": [{"ID": 0}]}},
], "cpu_ids": [0, 1]}


def _pod(name, resource, ids):
    return {"name": name, "namespace": "ml", "containers": [{"name": "c", "devices": [
        {"resource_name": resource, "device_ids": ids}]}]}


def test_allocatable_devices_with_numa(tmp_path):
    sock = str(tmp_path / "kubelet.sock")
    with serve(sock, allocatable=lambda: ALLOCATABLE), kubelet.Client(sock) as client:
        got = client.get_allocatable_devices(timeout=5)
    assert got == {"nvidia.com/gpu": {GPUS[0]: (0,), GPUS[1]: (0,), GPUS[2]: (1,), GPUS[3]: (1,)},
                   "nvidia.com/gpu.shared": {f"{SHARED}::{n}": (1,) for n in range(4)},
                   "nvidia.com/mig-1g.10gb": {MIG: ()}}


def test_free_is_allocatable_minus_list(tmp_path):
    sock = str(tmp_path / "kubelet.sock")
    pods = [_pod("a", "nvidia.com/gpu", [GPUS[1], GPUS[3]]), _pod("b", "nvidia.com/gpu.shared", [f"{SHARED}::2"])]
    with serve(sock, pods=pods, allocatable=lambda: ALLOCATABLE), kubelet.Client(sock) as client:
        free = kubelet.free_devices(client.get_allocatable_devices(timeout=5), client.list_allocations(timeout=5))
    assert free == {"nvidia.com/gpu": (GPUS[0], GPUS[2]), "nvidia.com/gpu.shared": (), "nvidia.com/mig-1g.10gb": (MIG,)}


def test_free_devices_is_per_resource():
    held = [Allocation(namespace="ml", pod="p", container="c", resource="nvidia.com/gpu", device_id=GPUS[0])]
    allocatable = {"nvidia.com/gpu": [GPUS[0], GPUS[1]], "nvidia.com/gpu.shared": [f"{GPUS[0]}::0"]}
    assert kubelet.free_devices(allocatable, held) == {"nvidia.com/gpu": (GPUS[1],),
                                                       "nvidia.com/gpu.shared": (GPUS[0],)}


def test_fleet_allocatable_carries_numa_and_covers_allocations(tmp_path):
    fleet = build_fleet(gpus=16, seed=1, days=1)
    node = "gpu-node-001"
    fleet = replace(fleet, devices=tuple(replace(d, numa_node=d.gpu_index // 4) if d.node == node else d
                                         for d in fleet.devices))
    sock = str(tmp_path / "kubelet.sock")
    with serve(sock, pods=pods_from_fleet(fleet, node=node, t=fleet.start + 3600),
               allocatable=lambda: allocatable_from_fleet(fleet, node=node)), kubelet.Client(sock) as client:
        got = client.get_allocatable_devices(timeout=5)
        used = client.list_allocations(timeout=5)
    numa = {d.gpu_uuid: d.numa_node for d in fleet.devices if d.node == node}
    whole = got.get("nvidia.com/gpu", {})
    assert whole and all(nodes == (numa[uuid],) for uuid, nodes in whole.items())
    offered = {kubelet.split_device_id(raw)[0] for ids in got.values() for raw in ids}
    assert used and {a.device_id for a in used} <= offered
    other = allocatable_from_fleet(fleet, node="gpu-node-000")  # NUMA unknown there: no topology given
    assert all("topology" not in entry for entry in other["devices"])
