"""Demo and test machinery, never used against a real kubelet: a real pod-resources gRPC server on
a unix socket that plays the kubelet for `gpuwatch export --simulate-kubelet`, the demo and tests.

``serve()`` binds the generated ``PodResourcesLister`` servicer to ``unix://<socket_path>`` and
answers ``List`` / ``GetAllocatableResources`` / ``Get`` from callables evaluated on every call, so
the answer can follow a clock. ``delay`` simulates a hanging kubelet, ``fail`` an erroring one;
both can be changed on the returned handle while it runs. ``pods_from_fleet()`` turns a
:class:`gpuwatch.fleet.Fleet` into what a kubelet on its nodes would report at an instant.

Pods and allocatable resources may be given as generated protobuf messages or as plain dicts in
the messages' shape (``{"name", "namespace", "containers": [{"name", "devices": [{"resource_name",
"device_ids"}]}]}``), converted with protobuf's ``json_format``.
"""

from __future__ import annotations

import heapq
import os
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent import futures

from gpuwatch.fleet import Fleet
from gpuwatch.sources.kubelet import stubs

_MAX_UNIX_PATH = 107  # sun_path is 108 bytes including the NUL


class KubeletServer:
    """Handle on a running fake kubelet. ``delay``/``fail`` may be reassigned while it serves."""

    def __init__(self, socket_path: str, *, pods, allocatable, delay: float, fail: bool | str):
        self.socket_path = socket_path
        self.pods, self.allocatable = pods, allocatable
        self.delay, self.fail = delay, fail
        self.calls: Counter[str] = Counter()  # RPC method -> calls answered or refused
        self._stopping = threading.Event()
        self._server = None

    def stop(self, grace: float = 0.0) -> None:
        """Stop serving (releasing any call held by ``delay``) and remove the socket file."""
        self._stopping.set()
        if self._server is not None:
            self._server.stop(grace).wait()
            self._server = None
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def __enter__(self) -> KubeletServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # the servicer methods (duck-typed for add_PodResourcesListerServicer_to_server)
    def List(self, request, context):
        api_pb2, _ = stubs()
        return self._answer("List", context, lambda: api_pb2.ListPodResourcesResponse(
            pod_resources=[_message(api_pb2.PodResources, p) for p in _items(self.pods)]))

    def GetAllocatableResources(self, request, context):
        api_pb2, _ = stubs()
        return self._answer("GetAllocatableResources", context, lambda: _message(
            api_pb2.AllocatableResourcesResponse, self.allocatable() if self.allocatable else {}))

    def Get(self, request, context):
        import grpc

        api_pb2, _ = stubs()
        pods = self._answer("Get", context, lambda: [_message(api_pb2.PodResources, p) for p in _items(self.pods)])
        for pod in pods:
            if pod.name == request.pod_name and pod.namespace == request.pod_namespace:
                return api_pb2.GetPodResourcesResponse(pod_resources=pod)
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_namespace}/{request.pod_name} not found")

    def _answer(self, method: str, context, build: Callable):
        import grpc

        self.calls[method] += 1
        if self.delay > 0:
            self._stopping.wait(self.delay)  # a hung kubelet; stop() releases it
        if self.fail:
            code = grpc.StatusCode.INTERNAL if self.fail is True else grpc.StatusCode[str(self.fail).upper()]
            context.abort(code, f"simulated kubelet failure in {method}")
        try:
            return build()
        except Exception as exc:  # bad test/demo input must reach the client, not kill the server
            context.abort(grpc.StatusCode.INTERNAL, f"fake kubelet could not build its answer: {exc!r}")


def serve(socket_path: str, *, pods: Callable[[], Sequence] | Sequence = (), allocatable: Callable | None = None,
          delay: float = 0.0, fail: bool | str = False, max_workers: int = 4) -> KubeletServer:
    """Start a PodResourcesLister gRPC server on ``unix://socket_path``; returns its handle.

    ``pods`` returns the pods to ``List`` (called per request); ``allocatable`` returns the
    ``GetAllocatableResources`` answer. ``fail``: False, True (INTERNAL) or a gRPC status code
    name such as ``"UNAVAILABLE"``. A stale socket file at the path is replaced, as kubelet does.
    """
    import grpc

    _, api_pb2_grpc = stubs()
    path = os.path.abspath(socket_path)
    if len(path.encode()) > _MAX_UNIX_PATH:
        raise ValueError(f"unix socket path too long ({len(path.encode())} > {_MAX_UNIX_PATH} bytes): {path}")
    if os.path.exists(path):
        os.unlink(path)
    handle = KubeletServer(path, pods=pods, allocatable=allocatable, delay=delay, fail=fail)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=max_workers))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(handle, server)
    try:
        bound = server.add_insecure_port(f"unix://{path}")
    except RuntimeError:  # newer grpcio raises where older returned 0
        bound = 0
    if not bound:
        raise OSError(f"could not bind the fake kubelet to unix://{path} (does {os.path.dirname(path)} exist?)")
    server.start()
    handle._server = server
    return handle


def pods_from_fleet(fleet: Fleet, *, node: str | None = None, t: float) -> list[dict]:
    """The pods a kubelet would list at instant ``t`` (on ``node``, or on every node).

    Whole GPUs: ``nvidia.com/gpu`` with GPU UUIDs (several for multi-GPU pods); MIG instances:
    ``nvidia.com/mig-<profile>`` with ``MIG-…`` UUIDs; time-sliced pods: ``nvidia.com/gpu.shared``
    with ``<GPU uuid>::<replica>``, the replica stable for the pod's lifetime.
    """
    replicas = _replica_ids(fleet)
    active: dict[int, list[int]] = {}  # pod index -> its device indexes, in segment order
    for seg in fleet.segments:
        if seg.pod is not None and seg.start <= t < seg.end and node in (None, fleet.devices[seg.device].node):
            active.setdefault(seg.pod, []).append(seg.device)
    out = []
    for index, devices in sorted(active.items()):
        pod = fleet.pods[index]
        ids = [_device_id(fleet, d, replicas.get((d, index))) for d in devices]
        out.append({"name": pod.pod, "namespace": pod.namespace, "containers": [
            {"name": pod.container, "devices": [{"resource_name": pod.gpu_resource, "device_ids": ids}]}]})
    return out


def allocatable_from_fleet(fleet: Fleet, *, node: str | None = None, replicas: int = 4) -> dict:
    """What ``GetAllocatableResources`` would list for the fleet's node(s), in the message's shape:
    as the kubelet lists them, one ``ContainerDevices`` per device (a time-sliced GPU's replicas
    together), with the device's NUMA node as its topology where the fleet knows it."""
    shared = {seg.device for seg in fleet.segments if seg.share < 1.0}
    out = []
    for i, device in enumerate(fleet.devices):
        if node not in (None, device.node):
            continue
        if device.is_mig:
            entry = {"resource_name": f"nvidia.com/mig-{device.mig_profile}", "device_ids": [device.mig_uuid]}
        elif i in shared:
            entry = {"resource_name": "nvidia.com/gpu.shared",
                     "device_ids": [f"{device.gpu_uuid}::{n}" for n in range(replicas)]}
        else:
            entry = {"resource_name": "nvidia.com/gpu", "device_ids": [device.gpu_uuid]}
        if device.numa_node is not None:
            entry["topology"] = {"nodes": [{"ID": device.numa_node}]}
        out.append(entry)
    return {"devices": out}


def _replica_ids(fleet: Fleet) -> dict[tuple[int, int], int]:
    """(device, pod) -> replica for time-sliced segments: lowest free replica, in start order."""
    out: dict[tuple[int, int], int] = {}
    by_device: dict[int, list] = {}
    for seg in fleet.segments:
        if seg.pod is not None and seg.share < 1.0:
            by_device.setdefault(seg.device, []).append(seg)
    for device, segs in by_device.items():
        busy: list[tuple[float, int]] = []  # heap of (end, replica)
        free: list[int] = []
        for seg in sorted(segs, key=lambda s: (s.start, s.pod)):
            while busy and busy[0][0] <= seg.start:
                heapq.heappush(free, heapq.heappop(busy)[1])
            replica = heapq.heappop(free) if free else len(busy)
            heapq.heappush(busy, (seg.end, replica))
            out[(device, seg.pod)] = replica
    return out


def _device_id(fleet: Fleet, device_index: int, replica: int | None) -> str:
    device = fleet.devices[device_index]
    base = device.mig_uuid or device.gpu_uuid
    return base if replica is None else f"{base}::{replica}"


def _items(source) -> list:
    return list(source() if callable(source) else source)


def _message(cls, value):
    """A generated message from itself or from a dict in its shape."""
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"expected {cls.__name__} or a dict in its shape, got {type(value).__name__}")
    from google.protobuf import json_format

    return json_format.ParseDict(value, cls())
