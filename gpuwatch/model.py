"""The contracts between gpuwatch's stages: frozen records and the bundle's columns (docs/architecture.md#data-contract).

Base units everywhere: ratios 0-1, bytes, watts, seconds, USD. Missing is ``None``/NaN, never 0.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# The bundle (docs/architecture.md#data-contract): file name -> columns, in order. store/schema.sql, the simulator and
# sample_data/ all use exactly these; tests/test_contracts.py keeps them in step.
BUNDLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "devices": (
        "node", "gpu_uuid", "gpu_index", "gpu_model", "fb_total_bytes", "mig_gi_id",
        "mig_profile", "mig_profile_id", "mig_placement_start", "mig_placement_size",
        # the node's NVIDIA driver and the CUDA version it supports ("550.127.08", "12.4"); last so
        # older stores can add them
        "driver_version", "cuda_driver_version",
        # the NUMA node the GPU is attached to (nvmlDeviceGetNumaNodeId / topo -m "NUMA Affinity"), and its
        # multi-node NVLink clique ("<cluster uuid>/<clique id>" from nvmlDeviceGetGpuFabricInfo: GPUs of one
        # clique on different nodes talk over NVLink); empty = unknown
        "numa_node", "nvlink_clique",
    ),
    "samples": (
        "ts", "node", "gpu_uuid", "mig_gi_id", "namespace", "pod", "container", "gpu_util",
        "gr_engine_active", "sm_active", "sm_occupancy", "tensor_active", "dram_active",
        "fb_used_bytes", "power_watts", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second",
    ),
    "pods": (
        "namespace", "pod", "pod_uid", "node", "owner_kind", "owner_name", "team",
        "priority_class", "start_ts", "end_ts", "gpu_resource", "gpu_count", "device_ids",
        # the pod's labels as a JSON object ({"cost_center": "cc-7", ...}; keys as kube-state-metrics
        # exports them, without "label_"), for grouping by any label; last so older stores can add it
        "labels",
    ),
    # node_label "key=value" (optional): the price of this model on nodes carrying that label (spot vs
    # on-demand capacity: karpenter.sh/capacity-type=spot); last so older stores can add it
    "prices": ("gpu_model", "usd_per_gpu_hour", "node_label"),
    # a node's labels as a JSON object, keys as kube-state-metrics names them (kube_node_labels)
    "nodes": ("node", "labels"),
    # namespace -> team for pods without a team label; ``namespace`` may be a glob (``nlp-*``)
    "teams": ("namespace", "team"),
    # A pod's (container's) state from kube-state-metrics, one row per change (a state holds until the
    # pod's next row): phase (Pending/Running/Succeeded/Failed/Unknown), the container's restart count,
    # last termination reason (Error, OOMKilled, ...) and exit code, waiting reason (CrashLoopBackOff,
    # ...); ``job`` the gang the pod belongs to (Volcano/Kueue/Kubeflow/JobSet/owner, docs/architecture.md),
    # ``gpu_request`` the GPUs it requests (Pending pods hold none, so the pods file lacks them).
    # Pending demand (docs/architecture.md#topology): ``created_ts`` (kube_pod_created), ``scheduled_ts``
    # (kube_pod_status_scheduled_time), ``unschedulable`` 1 when the scheduler said so
    # (kube_pod_status_unschedulable / PodScheduled=False reason Unschedulable), 0 when it did not, empty
    # unknown; ``gpu_resource`` the extended resource requested (nvidia.com/gpu, nvidia.com/mig-1g.10gb);
    # ``node_selector`` the pod's node selector as a JSON object (kube_pod_nodeselectors), which narrows
    # the nodes it could run on. Last so older stores can add them.
    "pod_status": ("ts", "namespace", "pod", "container", "phase", "restarts", "last_terminated_reason",
                   "last_exit_code", "waiting_reason", "job", "gpu_request",
                   "created_ts", "scheduled_ts", "unschedulable", "gpu_resource", "node_selector"),
    # GPU health events: kind xid (code = the XID), ecc_dbe (code = double-bit errors in the event),
    # row_remap_failure, lost (fell off the bus); one row per event
    "health": ("ts", "node", "gpu_uuid", "kind", "code"),
    # The link between two GPUs of one node (gpuwatch/topology.py): ``link`` NV|PIX|PXB|PHB|NODE|SYS,
    # ``nvlinks`` the bonded NVLink count when NV. One row per pair, in either or both directions; static
    # (a load replaces the node's rows for the GPUs it carries). Absent = topology unknown.
    "topology": ("node", "gpu_uuid", "peer_gpu_uuid", "link", "nvlinks"),
    # GPU compute processes (NVML, host PIDs) and the pod each belongs to, from its cgroup: ``in_pod`` 1 with
    # the pod's ``pod_uid``, 0 for a process in no pod's cgroup (a host process), empty when its cgroup could
    # not be read; ``fb_used_bytes`` the memory it holds on the device (a MIG instance: ``mig_gi_id``).
    "processes": ("ts", "node", "gpu_uuid", "mig_gi_id", "pid", "pod_uid", "in_pod", "fb_used_bytes"),
    # The batch schedulers' own pending gauges, where they run (docs/architecture.md#topology): ``scheduler``
    # kueue | volcano, ``queue`` (Kueue ClusterQueue, Volcano queue), ``job`` (Volcano job id), ``status``
    # (Kueue: active | inadmissible; Volcano: pending | unschedulable), ``pending`` the count in ``unit``
    # (workloads | pod_groups | tasks). One row per series and time.
    "scheduler_pending": ("ts", "scheduler", "queue", "job", "status", "unit", "pending"),
}
HEALTH_KINDS: tuple[str, ...] = ("xid", "ecc_dbe", "row_remap_failure", "lost")
POD_PHASES: tuple[str, ...] = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
SCHEDULERS: tuple[str, ...] = ("kueue", "volcano")
SCHEDULER_UNITS: tuple[str, ...] = ("workloads", "pod_groups", "tasks")

# Columns of the simulator's ground truth (not part of the bundle contract; analyses never read it).
# ``topology`` (empty for most pods): well_placed | misplaced (a multi-GPU pod on a worse block than one
# free on its node at its start) | spread (a multi-pod job on more nodes than it needed) | blocked (a
# pending pod that enough free GPUs could have run, had they formed a block) | full (pending, too few
# free GPUs: no fragmentation). Pending pods are rows with behavior "pending", placement "none".
TRUTH_COLUMNS: tuple[str, ...] = ("namespace", "pod", "behavior", "placement", "team", "topology")

# Ground-truth behaviours the simulator generates.
BEHAVIORS: tuple[str, ...] = ("productive", "hoarder", "false_util", "pending")
# How a pod holds its GPU(s).
PLACEMENTS: tuple[str, ...] = ("whole", "mig", "shared", "none")  # none: a pod that never got a GPU


@dataclass(frozen=True)
class Device:
    """A whole GPU, or one MIG GPU instance on it (then the ``mig_*`` fields are set).

    ``gpu_uuid``/``gpu_index``/``pci_bus_id``/``gpu_model`` are always the *parent* GPU's, as in
    dcgm-exporter's labels; ``mig_uuid`` is the ``MIG-…`` id kubelet hands to pods.
    """

    node: str
    gpu_uuid: str
    gpu_index: int
    gpu_model: str
    fb_total_bytes: int
    pci_bus_id: str = ""
    mig_gi_id: int | None = None
    mig_profile: str | None = None
    mig_profile_id: int | None = None
    mig_placement_start: int | None = None
    mig_placement_size: int | None = None
    mig_uuid: str | None = None
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    numa_node: int | None = None
    nvlink_clique: str | None = None

    @property
    def is_mig(self) -> bool:
        return self.mig_gi_id is not None

    @property
    def key(self) -> str:
        """Stable identity on a node: the GPU UUID, or ``<gpu uuid>/<gi id>`` for a MIG instance."""
        return self.gpu_uuid if self.mig_gi_id is None else f"{self.gpu_uuid}/{self.mig_gi_id}"

    def bundle_row(self) -> dict:
        """This device as a row of the bundle's ``devices`` file."""
        return {name: getattr(self, name) for name in BUNDLE_COLUMNS["devices"]}


@dataclass(frozen=True)
class Pod:
    """One pod's GPU allocation, as the bundle's ``pods`` file holds it (times in epoch seconds)."""

    namespace: str
    pod: str
    pod_uid: str
    node: str
    owner_kind: str
    owner_name: str
    team: str
    priority_class: str
    start_ts: float
    end_ts: float | None
    gpu_resource: str
    gpu_count: float
    device_ids: tuple[str, ...]
    container: str = "main"
    labels: tuple[tuple[str, str], ...] = ()

    def bundle_row(self) -> dict:
        row = {name: getattr(self, name) for name in BUNDLE_COLUMNS["pods"]}
        row["device_ids"] = ",".join(self.device_ids)
        row["labels"] = json.dumps(dict(self.labels), sort_keys=True) if self.labels else None
        return row


@dataclass(frozen=True)
class Allocation:
    """One container's claim on one device, as the kubelet pod-resources API reports it.

    ``device_id`` is the id with any time-slicing ``::<n>`` suffix removed (a ``GPU-…`` or
    ``MIG-…`` UUID, or an index when the device plugin runs with ``deviceIDStrategy=index``);
    ``vgpu`` is that ``<n>`` (the replica), ``None`` when the GPU is not shared.
    """

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str
    vgpu: str | None = None
