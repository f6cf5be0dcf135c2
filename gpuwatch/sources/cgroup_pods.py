"""Which pod a host process belongs to, read from its cgroup (``/proc/<pid>/cgroup``).

NVML lists the processes holding GPU memory by host PID; the kubelet names each pod's cgroup after
the pod's UID and the container runtime names each container's cgroup after the container id, so
the cgroup path joins a PID to its pod without the Kubernetes API. The two cgroup drivers name them
differently (kubelet: pkg/kubelet/cm/cgroup_manager_linux.go, "Configuring a cgroup driver" docs):

- ``cgroupfs``: ``/kubepods/pod<uid>/<id>`` (Guaranteed), ``/kubepods/burstable/pod<uid>/<id>``,
  ``/kubepods/besteffort/pod<uid>/<id>``; CRI-O writes the container as ``crio-<id>``.
- ``systemd``: ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice/…``
  (``kubepods-pod<uid>.slice`` for Guaranteed, ``kubepods-besteffort-pod<uid>.slice``), the UID's
  dashes written as underscores (systemd reads "-" in a slice name as nesting), each container a
  scope named by its runtime: ``cri-containerd-<id>.scope``, ``crio-<id>.scope``, ``docker-<id>.scope``.

cgroup v1 lists one line per hierarchy (``ID:controllers:path``), v2 one line ``0::path``. A reader in
its own cgroup namespace (the exporter's container, cgroup v2) sees other processes' paths relative to
its own root (``0::/../../kubepods-…``, or ``0::/../../besteffort/pod<uid>/<id>`` under cgroupfs), so
names are matched wherever they occur on the path: a systemd pod slice names ``kubepods`` itself, a
cgroupfs ``pod<uid>`` must sit below ``kubepods``, a QoS cgroup or a ``..``. Static pods have
32-hex-digit UIDs (a hash of the manifest), others UUIDs.

Three answers, never confused: a ``PodRef`` (the pod's UID, and the container id as the runtime
reports it, without ``containerd://``, where the process is in a container's cgroup); ``None``, a host
process (no pod on any line); ``Unknown`` (the file could not be read: the process exited, or /proc is
mounted with hidepid; or it was empty) — unknown is not "no pod".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_SYSTEMD_POD = re.compile(r"^(?P<parent>.*-)?pod(?P<uid>[0-9a-fA-F_]{32,36})\.slice$")
_CGROUPFS_POD = re.compile(r"^pod(?P<uid>[0-9a-fA-F-]{32,36})$")
# the container's cgroup: a bare id (containerd, Docker on cgroupfs) or the runtime's prefix and scope;
# crio-conmon-<id>.scope (CRI-O's monitor, not the container) matches nothing
_CONTAINER = re.compile(r"^(?:(?:cri-containerd|crio|docker)-)?(?P<id>[0-9a-f]{64})(?:\.scope)?$")
_UID = re.compile(r"^(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|[0-9a-f]{32})$")


@dataclass(frozen=True)
class PodRef:
    """The pod (and container, None where the process sits in the pod's own cgroup) of a process."""

    pod_uid: str
    container_id: str | None = None


@dataclass(frozen=True)
class Unknown:
    """The process's pod cannot be told; ``reason`` says why (exited, permission denied, ...)."""

    reason: str


Resolution = PodRef | Unknown | None  # None = a host process, in no pod


def parse_cgroup(text: str) -> PodRef | None:
    """The pod of the process whose ``/proc/<pid>/cgroup`` is ``text`` (v1 or v2); None = no pod."""
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and (found := pod_of_path(parts[2])) is not None:
            return found
    return None


def pod_of_path(path: str) -> PodRef | None:
    """The pod named by one cgroup path (either driver), None where the path is no pod's."""
    segments = [s for s in path.strip().split("/") if s]
    for i, segment in enumerate(segments):
        uid = _pod_uid(segment, below_kubepods=any(_kubepods_like(s) for s in segments[:i]))
        if uid is not None:
            child = _CONTAINER.match(segments[i + 1]) if i + 1 < len(segments) else None
            return PodRef(uid, child.group("id") if child else None)
    return None


def _kubepods_like(segment: str) -> bool:
    """A cgroup the kubelet's pod cgroups sit below, or the way up out of the reader's cgroup namespace."""
    return "kubepods" in segment or segment in ("burstable", "besteffort", "..")


def _pod_uid(segment: str, *, below_kubepods: bool) -> str | None:
    if (m := _SYSTEMD_POD.match(segment)) and (below_kubepods or "kubepods" in (m.group("parent") or "")):
        uid = m.group("uid").replace("_", "-").lower()
    elif (m := _CGROUPFS_POD.match(segment)) and below_kubepods:
        uid = m.group("uid").lower()
    else:
        return None
    return uid if _UID.match(uid) else None


def read_cgroup(pid: int, *, proc_root: str = "/proc") -> str | Unknown:
    """The text of ``<proc_root>/<pid>/cgroup`` (``/host/proc`` in the DaemonSet, whose PIDs are the
    host's, as NVML reports them), or Unknown saying why it could not be read."""
    if pid <= 0:
        return Unknown(f"no process id ({pid})")
    try:
        text = (Path(proc_root) / str(pid) / "cgroup").read_text(encoding="utf-8", errors="replace")
    except (FileNotFoundError, ProcessLookupError):
        return Unknown("process exited")
    except PermissionError:
        return Unknown("permission denied")
    except OSError as exc:
        return Unknown(exc.strerror or type(exc).__name__)
    return text if text.strip() else Unknown("empty cgroup file")


def resolve_pid(pid: int, *, proc_root: str = "/proc") -> Resolution:
    """The pod of host process ``pid``: a PodRef, None (a host process) or Unknown."""
    text = read_cgroup(pid, proc_root=proc_root)
    return text if isinstance(text, Unknown) else parse_cgroup(text)


@dataclass(frozen=True)
class GpuProcess:
    """One NVML compute process joined to its pod. ``owner``: "pod", "host" (in no pod) or "unknown"."""

    pid: int
    used_memory_bytes: int | None
    gpu_instance_id: int | None  # MIG GPU instance; None on a whole GPU
    compute_instance_id: int | None
    owner: str
    pod_uid: str | None = None
    container_id: str | None = None
    reason: str | None = None  # why the owner is unknown


def join_processes(processes: Iterable[Mapping], resolve: Callable[[int], Resolution]) -> tuple[GpuProcess, ...]:
    """NVML compute processes (``nvml.read``'s per-GPU ``processes``: pid, used_memory bytes,
    gpu_instance_id, compute_instance_id) joined to their pods by ``resolve`` (``resolve_pid`` with the
    node's proc root; each PID resolved once per call)."""
    seen: dict[int, Resolution] = {}
    out = []
    for p in processes:
        pid = int(p["pid"])
        found = seen[pid] if pid in seen else seen.setdefault(pid, resolve(pid))
        ids = {"pid": pid, "used_memory_bytes": p.get("used_memory"), "gpu_instance_id": p.get("gpu_instance_id"),
               "compute_instance_id": p.get("compute_instance_id")}
        if isinstance(found, PodRef):
            out.append(GpuProcess(**ids, owner="pod", pod_uid=found.pod_uid, container_id=found.container_id))
        elif isinstance(found, Unknown):
            out.append(GpuProcess(**ids, owner="unknown", reason=found.reason))
        else:
            out.append(GpuProcess(**ids, owner="host"))
    return tuple(out)
