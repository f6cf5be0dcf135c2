"""kubelet pod-resources source: which pod's container holds which GPU or MIG instance on this node.

kubelet serves the v1 ``PodResourcesLister`` gRPC API on a unix socket
(default ``/var/lib/kubelet/pod-resources/kubelet.sock``). ``read()`` does the I/O (one ``List``
call under a deadline); ``parse()`` is pure and turns the response into :class:`Allocation` rows.
``Client`` keeps one channel per socket for callers that poll (the exporter, once a scrape); the
module-level functions open and close their own. Every failure is a :class:`KubeletError` whose
``reason`` is one of :data:`REASONS`, so a scrape can report it instead of crashing.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from gpuwatch.model import Allocation

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Exact names, or prefixes ending in "*". MIG devices (mixed strategy) are always matched.
DEFAULT_RESOURCE_NAMES: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*")
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
REASONS = ("socket_missing", "timeout", "unavailable", "error")
# kubelet lists every pod's CPU ids and memory blocks; big nodes outgrow gRPC's 4 MiB default.
_MAX_MESSAGE_BYTES = 16 << 20
# A cached channel must notice a restarted kubelet within a scrape or two, not gRPC's default 120 s.
_CHANNEL_OPTIONS = (("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                    ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000))


class KubeletError(Exception):
    """The pod-resources API could not be read; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, message: str):
        if reason not in REASONS:
            raise ValueError(f"unknown KubeletError reason {reason!r}; expected one of {REASONS}")
        super().__init__(message)
        self.reason = reason


def stubs():
    """The generated ``(api_pb2, api_pb2_grpc)`` modules; ImportError naming the fix if absent."""
    try:
        from gpuwatch.sources._podresources import api_pb2, api_pb2_grpc
    except ImportError as exc:
        raise ImportError(
            f"kubelet pod-resources stubs unavailable ({exc}): they are generated from api.proto at "
            "build time — reinstall with `pip install -e .` (or a wheel), with gpuwatch[exporter] "
            "(grpcio, protobuf) installed") from exc
    except RuntimeError as exc:  # generated code checks the grpcio/protobuf runtime it was built for
        raise ImportError(f"kubelet pod-resources stubs do not match the installed grpcio/protobuf: "
                          f"{exc} — rebuild with `pip install -e .`") from exc
    return api_pb2, api_pb2_grpc


class Client:
    """One gRPC channel to one kubelet socket, reused across calls; every call is a fresh RPC.

    The channel is rebuilt when the socket file is replaced (kubelet restart) or after the
    kubelet was unavailable, so a reused channel never hides a new kubelet behind gRPC backoff.
    """

    def __init__(self, socket_path: str = DEFAULT_SOCKET):
        self.socket_path = socket_path
        self._channel = None
        self._inode: int | None = None
        self._lock = threading.RLock()

    def read(self, *, timeout: float):
        """``List``: the raw ``ListPodResourcesResponse``."""
        api_pb2, _ = _stubs_or_error()
        return self._call("List", api_pb2.ListPodResourcesRequest(), timeout=timeout)

    def read_allocatable(self, *, timeout: float):
        """``GetAllocatableResources``: the raw ``AllocatableResourcesResponse``."""
        api_pb2, _ = _stubs_or_error()
        return self._call("GetAllocatableResources", api_pb2.AllocatableResourcesRequest(), timeout=timeout)

    def list_allocations(self, *, timeout: float,
                         resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES) -> list[Allocation]:
        """Every GPU/MIG device allocation on the node (see :func:`parse`)."""
        return parse(self.read(timeout=timeout), resource_names=resource_names)

    def get_allocatable(self, *, timeout: float,
                        resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES) -> dict[str, tuple[str, ...]]:
        """GPU resource name -> device ids the kubelet can hand out (see :func:`parse_allocatable`)."""
        return parse_allocatable(self.read_allocatable(timeout=timeout), resource_names=resource_names)

    def get_allocatable_devices(self, *, timeout: float, resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES
                                ) -> dict[str, dict[str, tuple[int, ...]]]:
        """GPU resource name -> device id -> its NUMA nodes (see :func:`parse_allocatable_devices`)."""
        return parse_allocatable_devices(self.read_allocatable(timeout=timeout), resource_names=resource_names)

    def close(self) -> None:
        """Close the channel; the next call dials again."""
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel, self._inode = None, None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, *, timeout: float):
        import grpc

        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        inode = self._check_socket()
        with self._lock:  # concurrent scrapes may share one client
            if self._channel is None or inode != self._inode:
                self.close()
                self._channel = grpc.insecure_channel(f"unix://{os.path.abspath(self.socket_path)}",
                                                      options=_CHANNEL_OPTIONS)
                self._inode = inode
            stub = stubs()[1].PodResourcesListerStub(self._channel)
        try:
            return getattr(stub, method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            error = _rpc_error(exc, method=method, socket_path=self.socket_path, timeout=timeout)
            if error.reason == "unavailable" and not os.access(self.socket_path, os.W_OK):
                error = KubeletError("error", f"no permission to connect to {self.socket_path} as uid "
                                     f"{os.geteuid()}: the kubelet's socket is root-only ({error})")
            if error.reason != "timeout":  # dial afresh next time rather than wait out a backoff
                self.close()
            raise error from None

    def _check_socket(self) -> int:
        path = self.socket_path
        try:
            info = os.stat(path)
        except FileNotFoundError:
            self.close()
            raise KubeletError("socket_missing", f"kubelet pod-resources socket {path} does not exist "
                               "(is /var/lib/kubelet/pod-resources mounted from the host?)") from None
        except OSError as exc:
            raise KubeletError("error", f"cannot stat kubelet socket {path}: {exc}") from None
        if not stat.S_ISSOCK(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a socket"
            raise KubeletError("socket_missing", f"{path} is {kind}: mount the host directory "
                               "/var/lib/kubelet/pod-resources, not the socket file itself")
        return info.st_ino


def read(socket_path: str, *, timeout: float):
    """One ``List`` call on a fresh channel: the raw ``ListPodResourcesResponse``."""
    with Client(socket_path) as client:
        return client.read(timeout=timeout)


def list_allocations(socket_path: str, *, timeout: float,
                     resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES) -> list[Allocation]:
    """Every GPU/MIG allocation on the node behind ``socket_path``; raises :class:`KubeletError`."""
    return parse(read(socket_path, timeout=timeout), resource_names=resource_names)


def get_allocatable(socket_path: str, *, timeout: float,
                    resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES) -> dict[str, tuple[str, ...]]:
    """GPU resource name -> every device id the kubelet can allocate (allocated or not)."""
    with Client(socket_path) as client:
        return client.get_allocatable(timeout=timeout, resource_names=resource_names)


def parse(response, *, resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES) -> list[Allocation]:
    """``ListPodResourcesResponse`` -> one Allocation per (container, matching device id), in order.

    Other resources (CPUs, memory, non-GPU devices, DRA claims) are ignored. Duplicates are kept:
    a container given two replicas of one shared GPU holds two allocations.
    """
    wanted = resource_matcher(resource_names)
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                if not wanted(devices.resource_name):
                    continue
                for raw in devices.device_ids:
                    device_id, vgpu = split_device_id(raw)
                    out.append(Allocation(namespace=pod.namespace, pod=pod.name, container=container.name,
                                          resource=devices.resource_name, device_id=device_id, vgpu=vgpu))
    return out


def parse_allocatable(response, *,
                      resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES) -> dict[str, tuple[str, ...]]:
    """``AllocatableResourcesResponse`` -> GPU resource name -> raw device ids (``::n`` kept)."""
    devices = parse_allocatable_devices(response, resource_names=resource_names)
    return {name: tuple(ids) for name, ids in devices.items()}


def parse_allocatable_devices(response, *, resource_names: Sequence[str] = DEFAULT_RESOURCE_NAMES
                              ) -> dict[str, dict[str, tuple[int, ...]]]:
    """``AllocatableResourcesResponse`` -> GPU resource name -> raw device id -> the NUMA node ids the
    kubelet reports for it (``ContainerDevices.topology.nodes[].ID``; ``()`` = not reported)."""
    wanted = resource_matcher(resource_names)
    out: dict[str, dict[str, tuple[int, ...]]] = {}
    for devices in response.devices:
        if wanted(devices.resource_name):
            numa = tuple(sorted({int(n.ID) for n in devices.topology.nodes}))
            for device_id in devices.device_ids:
                out.setdefault(devices.resource_name, {})[device_id] = numa
    return out


def free_devices(allocatable: Mapping[str, Iterable[str]], allocations: Iterable[Allocation]) -> dict[str, tuple[str, ...]]:
    """Allocatable minus allocated: resource name -> device ids (replica suffix removed, kubelet's
    order) none of whose replicas a container holds; a resource with nothing free maps to ``()``."""
    held = {(a.resource, a.device_id) for a in allocations}
    out: dict[str, tuple[str, ...]] = {}
    for resource, ids in allocatable.items():
        devices = dict.fromkeys(split_device_id(raw)[0] for raw in ids)
        out[resource] = tuple(d for d in devices if (resource, d) not in held)
    return out


def resource_matcher(resource_names: Iterable[str]) -> Callable[[str], bool]:
    """Predicate for resource names: exact names, ``prefix*`` patterns, and always ``nvidia.com/mig-*``."""
    names = set(resource_names)
    prefixes = tuple({n[:-1] for n in names if n.endswith("*")} | {MIG_RESOURCE_PREFIX})
    return lambda name: name in names or name.startswith(prefixes)


def split_device_id(raw: str) -> tuple[str, str | None]:
    """Split a shared-GPU replica suffix off a device id: ``(device id, vgpu or None)``.

    NVIDIA's device plugin names time-sliced/MPS replicas ``<id>::<n>``; GKE names them
    ``<id>/vgpu<n>``. Anything else (GPU/MIG UUID, legacy MIG id, index) is returned unchanged.
    """
    if "::" in raw:
        base, _, replica = raw.rpartition("::")
        return base, replica
    base, sep, replica = raw.rpartition("/vgpu")
    if sep and replica.isdigit():
        return base, replica
    return raw, None


def _stubs_or_error():
    try:
        return stubs()
    except ImportError as exc:  # a scrape reports it through source_up rather than crashing
        raise KubeletError("error", str(exc)) from exc


def _rpc_error(exc, *, method: str, socket_path: str, timeout: float) -> KubeletError:
    import grpc

    code, details = exc.code(), exc.details()
    where = f"kubelet pod-resources {method} at {socket_path}"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return KubeletError("timeout", f"{where} did not answer within {timeout:g} s")
    if code == grpc.StatusCode.UNAVAILABLE:
        return KubeletError("unavailable", f"{where} is unavailable: {details}")
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return KubeletError("error", f"{where} is not implemented by this kubelet ({details}); "
                            "List needs v1 (1.20+), GetAllocatableResources 1.23+")
    return KubeletError("error", f"{where} failed: {code.name}: {details}")
