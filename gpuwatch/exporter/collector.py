"""The per-scrape custom collector: reads the source and the kubelet (cached for ``interval``),
builds fresh families each scrape, and knows whether the exporter is healthy.

A failing source or GPU never fails the scrape: a source exception makes
``gpuwatch_source_up{source}`` 0, a device's own error drops only that device's values, and a
kubelet failure drops only pod labels (``gpuwatch_attribution_error_info{reason}`` says why).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuwatch.attribution import Attribution, attribute_with_unknown
from gpuwatch.exporter.exp import ExpFamily, ExpMetrics
from gpuwatch.exporter.exposition import render
from gpuwatch.exporter.families import Options, Status, build
from gpuwatch.exporter.topology import TopologyView, view
from gpuwatch.model import Allocation
from gpuwatch.sources import Snapshot, Source
from gpuwatch.sources.kube_pods import PodMeta
from gpuwatch.sources.node_topology import NodeTopology, unknown
from gpuwatch.sources.simulate import SimulatedSource, allocatable_at, allocations_at

log = logging.getLogger(__name__)
AllocationReader = Callable[[], Sequence[Allocation]]
PodReader = Callable[[], Mapping[tuple[str, str], PodMeta]]
TopologyReader = Callable[[], NodeTopology]
AllocatableReader = Callable[[], Mapping[str, Mapping[str, tuple[int, ...]]]]  # resource -> device id -> NUMA


@dataclass(frozen=True)
class State:
    read_at: float
    snapshot: Snapshot | None
    attributed: Mapping[str, Sequence[Allocation]]
    status: Status
    listed_last: Mapping[str, Allocation] = field(default_factory=dict)  # device key -> kubelet's last
    exp: tuple[ExpFamily, ...] = ()  # DCGM_EXP_* families as of this refresh
    pods: Mapping[tuple[str, str], PodMeta] = field(default_factory=dict)  # pod UID/labels (Kubernetes API)
    topology: TopologyView | None = None  # the node's GPU topology and free GPUs (None: not read)
    owners: Mapping[int, object] | None = None  # host PID -> its pod (None: processes not resolved)


class ExporterCollector:
    """A prometheus_client custom collector (``collect()``) over one source and the kubelet.

    ``clock`` gives "now" for the source and the cache; readings are refreshed at most once per
    ``interval_s`` however often Prometheus (or a probe) asks, so 50 scrapes/s cost one read/s.
    ``topology`` reads the node's GPU topology: at the first read and again whenever the set of
    devices changes (it is static); ``allocatable`` the kubelet's allocatable devices, each refresh,
    for the free GPUs (allocatable minus the allocations just listed).
    """

    def __init__(self, source: Source, *, allocations: AllocationReader | None = None,
                 clock: Callable[[], float] = time.time, interval_s: float = 1.0,
                 options: Options | None = None, timer: Callable[[], float] = time.perf_counter,
                 exp: ExpMetrics | None = None, pods: PodReader | None = None,
                 topology: TopologyReader | None = None, allocatable: AllocatableReader | None = None,
                 owner: Callable[[int], object] | None = None):
        self.source, self._allocations, self._clock = source, allocations, clock
        self._interval, self.options, self._timer = interval_s, options or Options(), timer
        self._exp = exp  # windowed DCGM_EXP_* counts, fed every refresh (a counters file asked for them)
        self._pods = pods  # pod UID/labels from the Kubernetes API (cached by its reader), or None
        self._lock = threading.Lock()
        self._state: State | None = None
        self._seen: dict[str, str] = {}  # every GPU UUID seen since start -> its hostname
        self._topology_reader, self._allocatable = topology, allocatable
        self._topology: tuple[frozenset[str], NodeTopology] | None = None  # (device keys read for, answer)
        self._allocatable_error: str | None = None
        self._owner = owner  # host PID -> its pod (cgroup_pods.resolve_pid with --proc-root), or None

    def describe(self) -> list:
        return []  # registering must not trigger a read

    def collect(self) -> list:
        state = self.refresh()
        return build(state.snapshot, state.attributed, state.status, options=self.options,
                     listed_last=state.listed_last, exp=state.exp, pods=state.pods, topology=state.topology,
                     owners=state.owners)

    def refresh(self) -> State:
        """The cached state, re-read when older than the interval (one reader at a time)."""
        with self._lock:
            now = self._clock()
            if self._state is None or not 0 <= now - self._state.read_at < self._interval:
                self._state = self._read(now)
            return self._state

    def health(self) -> tuple[bool, str]:
        """(healthy, why): unhealthy with the source down or no GPU visible; the body says why."""
        state = self.refresh()
        st, snap = state.status, state.snapshot
        if not st.source_ok:
            return False, f"unhealthy: source {st.source} is down: {st.source_error}\n"
        gpus = {r.device.gpu_uuid for r in snap.readings}
        if not gpus:
            return False, f"unhealthy: source {st.source} sees no GPUs on this node\n"
        lines = [f"ok: {len(gpus)} GPUs ({len(snap.readings)} devices) from source {st.source}"]
        lines += [f"device error: {r.device.key}: {r.error}" for r in snap.readings if r.error]
        lines += [f"problem: {p}" for p in snap.problems]
        lines += [f"lost GPU (fell off the bus): {uuid}" for uuid in sorted(st.lost)]
        if st.unknown_devices:
            lines.append(f"kubelet allocates devices the source does not see: {', '.join(st.unknown_devices)}")
        if st.kubernetes_ok is False:
            lines.append(f"pod UID/labels unavailable: {st.kubernetes_error}; serving series without them")
        if st.attribution_reason:
            lines.append(f"attribution failing ({st.attribution_reason}): {st.attribution_error}; "
                         "serving metrics without pod labels")
        if st.topology_ok is False:
            lines.append(f"{st.topology_error}; serving no GPU link series")
        return True, "\n".join(lines) + "\n"

    def _read(self, now: float) -> State:
        started = self._timer()
        snapshot, error = None, None
        try:
            snapshot = self.source.read(now)
        except Exception as exc:  # any source failure must leave the scrape working
            error = f"{type(exc).__name__}: {exc}"
            log.warning("source %s read failed: %s", self.source.name, error)
        source_seconds = self._timer() - started
        result, kubelet = self._attribute(snapshot)
        pods, kubernetes = self._pod_meta()
        topology, topology_status = self._topology_view(snapshot, result, kubelet.get("kubelet_ok"))
        status = Status(source=self.source.name, source_ok=snapshot is not None, source_seconds=source_seconds,
                        source_error=error, lost=self._lost(snapshot), **kubelet, **kubernetes, **topology_status)
        exp: tuple[ExpFamily, ...] = ()
        if self._exp is not None and snapshot is not None:
            self._exp.update(now, snapshot.readings)
            exp = tuple(self._exp.samples())
        return State(read_at=now, snapshot=snapshot, attributed=result.by_device, status=status,
                     listed_last=result.last, exp=exp, pods=pods, topology=topology, owners=self._owners(snapshot))

    def _owners(self, snapshot: Snapshot | None) -> Mapping[int, object] | None:
        """Each compute process's pod from its cgroup, once per refresh (None: not resolving)."""
        if self._owner is None or snapshot is None:
            return None
        owners: dict[int, object] = {}
        for pid in sorted({p.pid for r in snapshot.readings for p in r.processes}):
            try:
                owners[pid] = self._owner(pid)
            except Exception as exc:  # a resolver bug must not fail the scrape: that PID is unknown
                log.warning("process %d: owner unknown: %s", pid, exc)
        return owners

    def _topology_view(self, snapshot: Snapshot | None, result: Attribution,
                       kubelet_ok: bool | None) -> tuple[TopologyView | None, dict]:
        """The topology view and its status fields; the free set only when the kubelet's List answered."""
        if self._topology_reader is None and self._allocatable is None:
            return None, {}
        node_topology = self._node_topology(snapshot)
        allocations = None
        if kubelet_ok:
            allocations = [a for found in result.by_device.values() for a in found] + list(result.unknown)
        allocatable = self._read_allocatable() if allocations is not None and self._allocatable else None
        status = {} if node_topology is None else {"topology_ok": node_topology.ok, "topology_error": node_topology.error}
        return view(node_topology, allocatable, allocations), status

    def _node_topology(self, snapshot: Snapshot | None) -> NodeTopology | None:
        """The driver's topology, read again only when the set of devices changed (a reader that
        raises is retried next refresh; its answer "unknown" is kept like any other)."""
        if self._topology_reader is None:
            return None
        if snapshot is None:  # source down: nothing to label; keep what was known
            return self._topology[1] if self._topology else None
        devices = frozenset(r.device.key for r in snapshot.readings)
        if self._topology is None or self._topology[0] != devices:
            try:
                self._topology = (devices, self._topology_reader())
            except Exception as exc:  # a reader bug or a driver gone mid-read must not fail the scrape
                log.warning("topology read failed: %s: %s", type(exc).__name__, exc)
                self._topology = None
                return unknown(f"topology unknown: {type(exc).__name__}: {exc}")
            log.info("topology read for %d devices: %s", len(devices), self._topology[1].error or "ok")
        return self._topology[1]

    def _read_allocatable(self):
        """The kubelet's allocatable devices, or None (free GPUs unknown) when it cannot say."""
        try:
            allocatable = self._allocatable()
        except Exception as exc:  # KubeletError: an old kubelet (GetAllocatableResources is 1.23+), a hiccup
            if str(exc) != self._allocatable_error:
                log.warning("free GPUs unknown: kubelet GetAllocatableResources failed: %s", exc)
            self._allocatable_error = str(exc)
            return None
        self._allocatable_error = None
        return allocatable

    def _pod_meta(self) -> tuple[Mapping, dict]:
        """Pod UID/labels and how reading them went; a failure drops them from series, nothing else."""
        if self._pods is None:
            return {}, {}
        started = self._timer()
        try:
            pods = self._pods()
        except Exception as exc:  # KubePodsError says why (unreachable, forbidden, error)
            log.warning("pod UID/labels unavailable: %s", exc)
            return {}, {"kubernetes_ok": False, "kubernetes_seconds": self._timer() - started,
                        "kubernetes_error": str(exc)}
        return pods, {"kubernetes_ok": True, "kubernetes_seconds": self._timer() - started}

    def _attribute(self, snapshot: Snapshot | None) -> tuple[Attribution, dict]:
        if self._allocations is None:
            return Attribution({}, []), {}
        started = self._timer()
        try:
            allocations = self._allocations()
        except Exception as exc:  # KubeletError carries .reason; anything else is "error"
            reason = getattr(exc, "reason", "error")
            log.warning("attribution failed (%s): %s", reason, exc)
            return Attribution({}, []), {"kubelet_ok": False, "kubelet_seconds": self._timer() - started,
                        "attribution_reason": reason, "attribution_error": str(exc)}
        seconds = self._timer() - started
        devices = [r.device for r in snapshot.readings] if snapshot else []

        result = attribute_with_unknown(devices, allocations)
        if result.unknown and snapshot is not None:
            log.info("kubelet allocations name devices the source does not see: %s", result.unknown_ids)
        return result, {"kubelet_ok": True, "kubelet_seconds": seconds,
                                  "unknown_devices": tuple(result.unknown_ids) if snapshot else ()}

    def _lost(self, snapshot: Snapshot | None) -> dict[str, str]:
        if snapshot is None:
            return {}  # the source is down: that is its own signal, not every GPU lost
        present = {r.device.gpu_uuid: r.device.node for r in snapshot.readings}
        lost = {uuid: node for uuid, node in self._seen.items() if uuid not in present}
        default_node = next(iter(present.values()), "")
        lost |= {uuid: present.get(uuid, self._seen.get(uuid, default_node)) for uuid in snapshot.lost}
        self._seen |= present
        return lost


def families_at(fleet, t: float, *, node: str | None = None, options: Options | None = None,
                timestamp: float | None = None) -> list:
    """The families the exporter serves for the simulated ``fleet`` at time ``t`` (no clock, no
    sockets): the simulate source's reading plus the kubelet's allocations at ``t``, attributed, and
    the fleet's topology with the kubelet's free GPUs at ``t``."""

    source = SimulatedSource(fleet, node=node)
    snapshot = source.read(t)
    allocations = allocations_at(fleet, source.fleet_time(t), node=node)
    result = attribute_with_unknown([r.device for r in snapshot.readings], allocations)
    node_topology = source.topology()
    status = Status(source="simulate", source_ok=True, source_seconds=0.0, kubelet_ok=True,
                    topology_ok=node_topology.ok, topology_error=node_topology.error)
    topology = view(node_topology, allocatable_at(fleet, node=node), allocations)
    return build(snapshot, result.by_device, status, options=options or Options(), timestamp=timestamp,
                 listed_last=result.last, topology=topology)


def render_at(fleet, t: float, *, node: str | None = None, options: Options | None = None,
              openmetrics: bool = False) -> str:
    """The /metrics text of the simulated ``fleet`` at simulated time ``t`` (epoch seconds).

    Exactly what ``gpuwatch export --source simulate --simulate-kubelet`` serves at that instant with
    ``options`` (compat.options for a profile; default: Options()),
    except ``gpuwatch_source_duration_seconds`` is 0. ``openmetrics=True`` stamps every sample with
    ``t`` and ends with ``# EOF`` (one instant; for many, see ``backfill.write_openmetrics``).
    """

    families = families_at(fleet, t, node=node, options=options, timestamp=t if openmetrics else None)
    return render(families, openmetrics=openmetrics).decode()
