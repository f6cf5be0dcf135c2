"""The kubelet pod-resources source against a REAL gRPC server on a unix socket.

The kubelet is the external boundary: ``gpuwatch.sources.kubelet_simulated`` plays it with the
generated v1 ``PodResourcesLister`` servicer over ``grpc.server`` on a socket under tmp_path, and
``gpuwatch.sources.kubelet`` talks to it exactly as to a kubelet. Checked: exact Allocations for
whole-GPU, MIG and time-sliced pods (CPU-only containers and other resources ignored); a committed
ListPodResourcesResponse payload (tests/fixtures/kubelet, built from the documented v1 shapes);
each failure reason (socket missing / not a socket, hanging, erroring, unimplemented, socket
deleted and replaced between calls); GetAllocatableResources; and the simulated fleet served by
``pods_from_fleet`` attributing every occupant that ``workloads.readings_at`` says is there.
"""

from __future__ import annotations

import socket
import time
from concurrent import futures

import pytest
from google.protobuf import text_format

from gpuwatch.attribution import attribute_with_unknown
from gpuwatch.fleet import build_fleet, readings_at
from gpuwatch.model import Allocation
from gpuwatch.sources import kubelet
from gpuwatch.sources.kubelet import KubeletError
from gpuwatch.sources.kubelet_simulated import allocatable_from_fleet, pods_from_fleet, serve
from tests.conftest import FIXTURES

api_pb2, api_pb2_grpc = kubelet.stubs()
GPU_A = "GPU-8f3b1a52-2c1d-4e6f-9a0b-1c2d3e4f5a6b"
GPU_B = "GPU-9a4c2b63-3d2e-5f70-ab1c-2d3e4f5a6b7c"
MIG_1G = "MIG-b6c1d2e3-0f4a-5b6c-8d7e-9f0a1b2c3d4e"


def _pod(name, namespace, *containers):
    return {"name": name, "namespace": namespace, "containers": list(containers)}


def _ctr(name, *devices, cpu_ids=()):
    return {"name": name, "devices": [{"resource_name": r, "device_ids": list(ids)} for r, ids in devices],
            "cpu_ids": list(cpu_ids)}


NODE_PODS = [
    _pod("kube-proxy-abcde", "kube-system", _ctr("kube-proxy", cpu_ids=[0, 1])),  # CPU only
    _pod("trainer-0", "nlp-train", _ctr("pytorch", ("nvidia.com/gpu", [GPU_A]), ("example.com/fpga", ["fpga0"])),
         _ctr("log-shipper")),
    _pod("nb-0", "research", _ctr("notebook", ("nvidia.com/mig-1g.10gb", [MIG_1G]))),
    *[_pod(f"serve-{n}", "serving", _ctr("server", ("nvidia.com/gpu.shared", [f"{GPU_B}::{n}"]))) for n in (0, 1, 2)],
    _pod("greedy-0", "serving", _ctr("server", ("nvidia.com/gpu.shared", [f"{GPU_B}::3", f"{GPU_B}::4"]))),
    _pod("fpga-only", "hw", _ctr("main", ("example.com/fpga", ["fpga1"]))),
]


def _alloc(namespace, pod, container, resource, device_id, vgpu=None):
    return Allocation(namespace=namespace, pod=pod, container=container, resource=resource,
                      device_id=device_id, vgpu=vgpu)


@pytest.fixture
def sock(tmp_path):
    return str(tmp_path / "kubelet.sock")


def test_whole_mig_and_time_sliced_allocations_over_grpc(sock):
    with serve(sock, pods=lambda: NODE_PODS):
        got = kubelet.list_allocations(sock, timeout=5)
    assert got == [
        _alloc("nlp-train", "trainer-0", "pytorch", "nvidia.com/gpu", GPU_A),
        _alloc("research", "nb-0", "notebook", "nvidia.com/mig-1g.10gb", MIG_1G),
        _alloc("serving", "serve-0", "server", "nvidia.com/gpu.shared", GPU_B, "0"),
        _alloc("serving", "serve-1", "server", "nvidia.com/gpu.shared", GPU_B, "1"),
        _alloc("serving", "serve-2", "server", "nvidia.com/gpu.shared", GPU_B, "2"),
        _alloc("serving", "greedy-0", "server", "nvidia.com/gpu.shared", GPU_B, "3"),
        _alloc("serving", "greedy-0", "server", "nvidia.com/gpu.shared", GPU_B, "4"),
    ]


def test_configured_resource_names_and_index_ids(sock):
    pods = [_pod("a", "x", _ctr("c", ("nvidia.com/a100", ["0", "1::2"]))),
            _pod("b", "x", _ctr("c", ("example.com/gpu-h100", ["GPU-x"]))),
            _pod("c", "x", _ctr("c", ("nvidia.com/mig-1g.10gb.me", ["MIG-y"])))]
    with serve(sock, pods=pods):
        default = kubelet.list_allocations(sock, timeout=5)
        extra = kubelet.list_allocations(sock, timeout=5, resource_names=["nvidia.com/a100", "example.com/gpu-*"])
    # MIG resources match without being configured; an a100 renamed resource only when configured.
    assert default == [_alloc("x", "c", "c", "nvidia.com/mig-1g.10gb.me", "MIG-y")]
    assert extra == [_alloc("x", "a", "c", "nvidia.com/a100", "0"),
                     _alloc("x", "a", "c", "nvidia.com/a100", "1", "2"),
                     _alloc("x", "b", "c", "example.com/gpu-h100", "GPU-x"),
                     _alloc("x", "c", "c", "nvidia.com/mig-1g.10gb.me", "MIG-y")]


@pytest.mark.parametrize(("raw", "expected"), [
    ("GPU-abc", ("GPU-abc", None)),
    ("GPU-abc::3", ("GPU-abc", "3")),
    ("MIG-def::1", ("MIG-def", "1")),
    ("0", ("0", None)),
    ("0::2", ("0", "2")),
    ("MIG-GPU-abc/1/0", ("MIG-GPU-abc/1/0", None)),  # legacy pre-R470 MIG id: attribution resolves it
    ("nvidia0/vgpu2", ("nvidia0", "2")),  # GKE time-sharing
    ("nvidia1/gi3/vgpu0", ("nvidia1/gi3", "0")),
])
def test_split_device_id(raw, expected):
    assert kubelet.split_device_id(raw) == expected


def _fixture_response():
    text = (FIXTURES / "kubelet" / "h100-mig-node.list.txtpb").read_text()
    return text_format.Parse(text, api_pb2.ListPodResourcesResponse())


def test_parse_captured_h100_mig_node():
    got = kubelet.parse(_fixture_response())
    gpu = "nvidia.com/gpu"
    assert got == [
        _alloc("ml-serving", "llama-8b-5d9c7b6f4-x2kq9", "server", "nvidia.com/mig-3g.40gb",
               "MIG-5c1e3f2a-9b7d-5e4c-8a6f-0d2b4c6e8a10"),
        _alloc("research-notebooks", "alice-nb-0", "notebook", "nvidia.com/mig-1g.10gb",
               "MIG-0a7d1c55-2e3b-5f90-b1c4-6d8e9f0a1b2c"),
        _alloc("research-notebooks", "bob-nb-0", "notebook", "nvidia.com/mig-1g.10gb",
               "MIG-1b8e2d66-3f4c-5a01-82d5-7e9f0a1b2c3d"),
        _alloc("ml-serving", "embedder-6f7d8c9b5-m4n7p", "embedder", "nvidia.com/mig-2g.20gb",
               "MIG-7c2f4a88-5b6d-5c23-94e7-9f0a1b2c3d4e"),
        _alloc("nlp-train", "llm-pretrain-worker-0", "pytorch", gpu, "GPU-2f6a9c1e-4b3d-7e58-a0c1-d2e3f4a5b6c7"),
        _alloc("nlp-train", "llm-pretrain-worker-0", "pytorch", gpu, "GPU-3a7b0d2f-5c4e-8f69-b1d2-e3f4a5b6c7d8"),
        _alloc("nlp-train", "llm-pretrain-worker-0", "pytorch", gpu, "GPU-4b8c1e30-6d5f-9a7a-c2e3-f4a5b6c7d8e9"),
        _alloc("nlp-train", "llm-pretrain-worker-0", "pytorch", gpu, "GPU-5c9d2f41-7e60-ab8b-d3f4-a5b6c7d8e9f0"),
        _alloc("vision", "detector-train-28391-hx7tq", "trainer", gpu, "GPU-6dae3052-8f71-bc9c-e4a5-b6c7d8e9f0a1"),
    ]


def test_fixture_served_over_grpc_round_trips(sock):
    response = _fixture_response()
    with serve(sock, pods=lambda: list(response.pod_resources)):
        raw = kubelet.read(sock, timeout=5)
    assert raw == response  # every field, DRA claims and NUMA topology included, survives the wire
    assert kubelet.parse(raw) == kubelet.parse(response)


def test_socket_missing(sock):
    with pytest.raises(KubeletError) as err:
        kubelet.list_allocations(sock, timeout=1)
    assert err.value.reason == "socket_missing"
    assert sock in str(err.value)


def test_socket_path_is_a_directory(tmp_path):
    # what kubelet leaves when a hostPath names the socket file itself before it exists
    (tmp_path / "kubelet.sock").mkdir()
    with pytest.raises(KubeletError) as err:
        kubelet.list_allocations(str(tmp_path / "kubelet.sock"), timeout=1)
    assert err.value.reason == "socket_missing"
    assert "is a directory" in str(err.value)


def test_hanging_kubelet_times_out_without_waiting_for_it(sock):
    with serve(sock, pods=NODE_PODS, delay=30) as server:
        started = time.monotonic()
        with pytest.raises(KubeletError) as err:
            kubelet.list_allocations(sock, timeout=0.5)
        waited = time.monotonic() - started
        assert server.calls["List"] == 1
    assert err.value.reason == "timeout"
    assert "0.5 s" in str(err.value)
    assert waited < 15  # bounded by our deadline, not by the server's 30 s hang


@pytest.mark.parametrize(("fail", "reason", "text"), [
    (True, "error", "INTERNAL"), ("UNAVAILABLE", "unavailable", "unavailable"),
    ("PERMISSION_DENIED", "error", "PERMISSION_DENIED")])
def test_erroring_kubelet(sock, fail, reason, text):
    with serve(sock, pods=NODE_PODS, fail=fail), pytest.raises(KubeletError) as err:
        kubelet.list_allocations(sock, timeout=5)
    assert err.value.reason == reason
    assert text in str(err.value) and "simulated kubelet failure in List" in str(err.value)


def test_stale_socket_with_nobody_listening_is_unavailable(sock):
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(sock)  # the file stays after close: a kubelet that died without cleaning up
    dead.close()
    with pytest.raises(KubeletError) as err:
        kubelet.list_allocations(sock, timeout=5)
    assert err.value.reason == "unavailable"


def test_kubelet_without_the_service_is_unimplemented(sock):
    import grpc

    bare = grpc.server(futures.ThreadPoolExecutor(1))
    bare.add_insecure_port(f"unix://{sock}")
    bare.start()
    try:
        with pytest.raises(KubeletError) as err:
            kubelet.get_allocatable(sock, timeout=5)
    finally:
        bare.stop(0).wait()
    assert err.value.reason == "error"
    assert "GetAllocatableResources" in str(err.value) and "not implemented" in str(err.value)


def test_reused_client_follows_socket_deleted_and_kubelet_restarted(sock):
    first = [_pod("old", "ns", _ctr("c", ("nvidia.com/gpu", [GPU_A])))]
    second = [_pod("new", "ns", _ctr("c", ("nvidia.com/gpu", [GPU_B])))]
    with kubelet.Client(sock) as client:
        server = serve(sock, pods=first)
        assert [a.pod for a in client.list_allocations(timeout=5)] == ["old"]
        server.stop()  # removes the socket file, as a stopping kubelet does
        with pytest.raises(KubeletError) as err:
            client.list_allocations(timeout=5)
        assert err.value.reason == "socket_missing"
        with serve(sock, pods=second):  # a new kubelet on the same path: fresh answer, never the old one
            assert [a.pod for a in client.list_allocations(timeout=5)] == ["new"]


def test_pods_callable_is_read_on_every_call(sock):
    pods = []
    with serve(sock, pods=lambda: pods) as server:
        assert kubelet.list_allocations(sock, timeout=5) == []
        pods.append(_pod("late", "ns", _ctr("c", ("nvidia.com/gpu", [GPU_A]))))
        assert [a.pod for a in kubelet.list_allocations(sock, timeout=5)] == ["late"]
        assert server.calls["List"] == 2


def test_get_allocatable(sock):
    allocatable = {"devices": [{"resource_name": "nvidia.com/gpu", "device_ids": [GPU_A]},
                               {"resource_name": "nvidia.com/gpu.shared",
                                "device_ids": [f"{GPU_B}::{n}" for n in range(4)]},
                               {"resource_name": "nvidia.com/mig-1g.10gb", "device_ids": [MIG_1G]},
                               {"resource_name": "example.com/fpga", "device_ids": ["fpga0"]}],
                   "cpu_ids": [0, 1, 2, 3]}
    with serve(sock, pods=[], allocatable=lambda: allocatable):
        got = kubelet.get_allocatable(sock, timeout=5)
        raw = kubelet.Client(sock).read_allocatable(timeout=5)
    assert got == {"nvidia.com/gpu": (GPU_A,),
                   "nvidia.com/gpu.shared": tuple(f"{GPU_B}::{n}" for n in range(4)),
                   "nvidia.com/mig-1g.10gb": (MIG_1G,)}
    assert list(raw.cpu_ids) == [0, 1, 2, 3]


def test_server_get_finds_one_pod(sock):
    import grpc

    with serve(sock, pods=NODE_PODS), grpc.insecure_channel(f"unix://{sock}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        found = stub.Get(api_pb2.GetPodResourcesRequest(pod_name="nb-0", pod_namespace="research"), timeout=5)
        with pytest.raises(grpc.RpcError) as err:
            stub.Get(api_pb2.GetPodResourcesRequest(pod_name="nb-0", pod_namespace="other"), timeout=5)
    assert found.pod_resources.containers[0].devices[0].device_ids == [MIG_1G]
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


def test_timeout_must_be_positive(sock):
    with pytest.raises(ValueError, match="timeout"):
        kubelet.Client(sock).read(timeout=0)


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=40, seed=3, days=2)  # nodes 0-4: mixed, train, mig, mixed, shared


def test_fleet_served_by_fake_kubelet_attributes_every_occupant(fleet, tmp_path):
    """Whatever readings_at says occupies a device is exactly what kubelet → attribution yields."""
    for node in ("gpu-node-001", "gpu-node-002", "gpu-node-004"):
        devices = [d for d in fleet.devices if d.node == node]
        for hours in (1, 13, 30):
            t = fleet.start + hours * 3600
            sock = str(tmp_path / f"{node[-3:]}-{hours}.sock")
            with serve(sock, pods=pods_from_fleet(fleet, node=node, t=t)):
                result = attribute_with_unknown(devices, kubelet.list_allocations(sock, timeout=5))
            truth = {(d.key, p.namespace, p.pod) for d, p, _ in readings_at(fleet, t, node=node) if p}
            got = {(key, a.namespace, a.pod) for key, allocs in result.by_device.items() for a in allocs}
            assert result.unknown == []
            assert got == truth, (node, hours)


def test_fleet_time_sliced_replicas_are_distinct_and_stable(fleet):
    shared = "gpu-node-004"
    replica_of: dict[str, set[str]] = {}
    for hours in range(0, 48, 2):
        pods = pods_from_fleet(fleet, node=shared, t=fleet.start + hours * 3600)
        ids = [i for p in pods for c in p["containers"] for d in c["devices"] for i in d["device_ids"]
               if d["resource_name"] == "nvidia.com/gpu.shared"]
        assert len(ids) == len(set(ids))  # no two pods on one replica at once
        assert {i.rpartition("::")[2] for i in ids} <= {"0", "1", "2", "3"}
        for p in pods:
            for c in p["containers"]:
                for d in c["devices"]:
                    if d["resource_name"] == "nvidia.com/gpu.shared":
                        replica_of.setdefault(p["name"], set()).update(d["device_ids"])
    assert len(replica_of) > 8  # pods came and went on the two shared GPUs
    assert all(len(ids) == 1 for ids in replica_of.values())  # a pod keeps its replica for life


def test_fleet_allocatable_covers_every_allocation(fleet):
    node = "gpu-node-002"
    allocatable = kubelet.parse_allocatable(_message_dict(allocatable_from_fleet(fleet, node=node)))
    offered = {i for ids in allocatable.values() for i in ids}
    used = {i for p in pods_from_fleet(fleet, node=node, t=fleet.start + 7200)
            for c in p["containers"] for d in c["devices"] for i in d["device_ids"]}
    assert used and used <= offered
    assert any(name.startswith("nvidia.com/mig-") for name in allocatable)


def _message_dict(value):
    from google.protobuf import json_format

    return json_format.ParseDict(value, api_pb2.AllocatableResourcesResponse())


def test_fake_kubelet_refuses_unusable_socket_paths(tmp_path):
    with pytest.raises(OSError, match=r"does .*missing exist"):
        serve(str(tmp_path / "missing" / "kubelet.sock"))
    with pytest.raises(ValueError, match="too long"):
        serve(str(tmp_path / ("d" * 120) / "kubelet.sock"))
