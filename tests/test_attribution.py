"""Attribution (pure): kubelet allocations joined to a node's devices, table-driven.

Checks that every sharing pod/replica gets its own entry (never last-writer-wins), MIG UUIDs and
legacy ``MIG-GPU-<uuid>/<gi>/<ci>`` ids map to the right instance, index and GKE ids map by
``gpu_index``, unallocated devices are present with no allocations, allocations of pods that are
gone leave nothing behind, and ids naming no device are reported as unknown. A hypothesis
property checks that no allocation is ever lost: each lands on one device or in ``unknown``.
No I/O and no fakes: devices and allocations are plain model records.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwatch.attribution import attribute, attribute_with_unknown
from gpuwatch.model import Allocation, Device

H100 = "NVIDIA H100 80GB HBM3"
FB = 81559 << 20
GPU0 = "GPU-11111111-aaaa-4bbb-8ccc-000000000000"
GPU1 = "GPU-22222222-aaaa-4bbb-8ccc-000000000001"
GPU2 = "GPU-33333333-aaaa-4bbb-8ccc-000000000002"  # MIG-enabled: only its instances are devices
GPU3 = "GPU-44444444-aaaa-4bbb-8ccc-000000000003"  # time-sliced, 4 replicas


def _gpu(uuid, index, node="node-a"):
    return Device(node=node, gpu_uuid=uuid, gpu_index=index, gpu_model=H100, fb_total_bytes=FB)


def _mig(gi, profile, profile_id, start, size, mig_uuid):
    return Device(node="node-a", gpu_uuid=GPU2, gpu_index=2, gpu_model=H100, fb_total_bytes=FB * size // 8,
                  mig_gi_id=gi, mig_profile=profile, mig_profile_id=profile_id,
                  mig_placement_start=start, mig_placement_size=size, mig_uuid=mig_uuid)


MIG_3G, MIG_1G_A, MIG_1G_B = (f"MIG-5555555{i}-bbbb-4ccc-8ddd-00000000000{i}" for i in range(3))
DEVICES = [
    _gpu(GPU0, 0), _gpu(GPU1, 1),
    _mig(1, "3g.40gb", 9, 4, 4, MIG_3G), _mig(7, "1g.10gb", 19, 0, 1, MIG_1G_A), _mig(8, "1g.10gb", 19, 1, 1, MIG_1G_B),
    _gpu(GPU3, 3),
]
KEYS = [d.key for d in DEVICES]  # GPU0, GPU1, "<GPU2>/1", "<GPU2>/7", "<GPU2>/8", GPU3


def a(pod, device_id, *, vgpu=None, container="main", namespace="ns", resource="nvidia.com/gpu"):
    return Allocation(namespace=namespace, pod=pod, container=container, resource=resource,
                      device_id=device_id, vgpu=vgpu)


def who(allocs):
    return [(x.pod, x.container, x.vgpu) for x in allocs]


CASES = {
    "whole GPU": ([a("p", GPU1)], {GPU1: [("p", "main", None)]}, []),
    "MIG instance by MIG UUID": ([a("p", MIG_1G_B, resource="nvidia.com/mig-1g.10gb")],
                                 {f"{GPU2}/8": [("p", "main", None)]}, []),
    "MIG instances of one GPU stay apart": (
        [a("big", MIG_3G), a("small", MIG_1G_A)],
        {f"{GPU2}/1": [("big", "main", None)], f"{GPU2}/7": [("small", "main", None)]}, []),
    "legacy MIG-GPU-<uuid>/<gi>/<ci> id": ([a("p", f"MIG-{GPU2}/7/0")], {f"{GPU2}/7": [("p", "main", None)]}, []),
    "time-slicing: 4 replicas -> 4 entries": (
        [a(f"s{n}", GPU3, vgpu=str(n), resource="nvidia.com/gpu.shared") for n in (3, 1, 0, 2)],
        {GPU3: [("s0", "main", "0"), ("s1", "main", "1"), ("s2", "main", "2"), ("s3", "main", "3")]}, []),
    "one pod holding two replicas of one GPU": (
        [a("greedy", GPU3, vgpu="10"), a("greedy", GPU3, vgpu="2")],
        {GPU3: [("greedy", "main", "2"), ("greedy", "main", "10")]}, []),
    "two containers of one pod on one GPU": (
        [a("p", GPU0, container="worker"), a("p", GPU0, container="sidecar")],
        {GPU0: [("p", "sidecar", None), ("p", "worker", None)]}, []),
    "index ids (deviceIDStrategy=index)": ([a("p", "0"), a("q", "3", vgpu="1")],
                                          {GPU0: [("p", "main", None)], GPU3: [("q", "main", "1")]}, []),
    "GKE device names": ([a("p", "nvidia1"), a("q", "nvidia2/gi1")],
                         {GPU1: [("p", "main", None)], f"{GPU2}/1": [("q", "main", None)]}, []),
    "UUIDs match whatever their case": ([a("p", GPU1.upper())], {GPU1: [("p", "main", None)]}, []),
    "unknown GPU and MIG ids are reported": (
        [a("p", "GPU-00000000-dead-4bee-8fff-000000000000"), a("q", "MIG-nope"), a("r", GPU0)],
        {GPU0: [("r", "main", None)]}, ["GPU-00000000-dead-4bee-8fff-000000000000", "MIG-nope"]),
    "parent UUID of a MIG-enabled GPU names no single instance": ([a("p", GPU2)], {}, [GPU2]),
    "index of a MIG-enabled GPU names no single instance": ([a("p", "2")], {}, ["2"]),
    "legacy id with an unknown GI": ([a("p", f"MIG-{GPU2}/9/0")], {}, [f"MIG-{GPU2}/9/0"]),
    "exact duplicates collapse": ([a("p", GPU0), a("p", GPU0)], {GPU0: [("p", "main", None)]}, []),
    "nothing allocated (pods gone)": ([], {}, []),
}


@pytest.mark.parametrize("name", list(CASES))
def test_attribution_table(name):
    allocations, expected, unknown = CASES[name]
    result = attribute_with_unknown(DEVICES, allocations)
    assert set(result.by_device) == set(KEYS)  # every device present, allocated or not
    assert {k: who(v) for k, v in result.by_device.items() if v} == expected
    assert result.unknown_ids == sorted(unknown)
    assert attribute(DEVICES, allocations) == result.by_device


def test_a_pod_that_is_gone_leaves_no_entry():
    before = attribute(DEVICES, [a("old", GPU0), a("kept", GPU1)])
    after = attribute(DEVICES, [a("kept", GPU1)])
    assert who(before[GPU0]) == [("old", "main", None)]
    assert after[GPU0] == [] and who(after[GPU1]) == [("kept", "main", None)]


def test_index_ids_are_ambiguous_across_nodes():
    devices = [_gpu(GPU0, 0, node="node-a"), _gpu(GPU1, 0, node="node-b")]
    result = attribute_with_unknown(devices, [a("p", "0"), a("q", GPU1)])
    assert result.unknown_ids == ["0"]
    assert who(result.by_device[GPU1]) == [("q", "main", None)]


_ids = st.sampled_from([GPU0, GPU1, GPU2, GPU3, MIG_3G, MIG_1G_A, "0", "2", "7", f"MIG-{GPU2}/8/0", "GPU-x", ""])
_allocations = st.lists(st.builds(
    a, st.sampled_from(["p", "q", "r"]), _ids, vgpu=st.sampled_from([None, "0", "1"]),
    container=st.sampled_from(["main", "side"])), max_size=30)


@given(_allocations)
def test_no_allocation_is_lost_or_duplicated(allocations):
    result = attribute_with_unknown(DEVICES, allocations)
    placed = [x for allocs in result.by_device.values() for x in allocs] + result.unknown
    assert sorted(placed, key=repr) == sorted(set(allocations), key=repr)
