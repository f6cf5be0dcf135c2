"""The signals gpuwatch's findings judge with, each declared once: what carries it, and how to turn it on.

A signal is one kind of evidence (SM activity, the pods' team labels, GPU prices, ...). Each row says
which Prometheus series carry it (any one of ``series``; dcgm-exporter's names of every generation
come from the field table, gpuwatch/fields.py), whether it is read per GPU node, and the exact
config that enables it: a dcgm-exporter counters-file line, the kube-state-metrics Helm values
(``KSM_VALUES``, one snippet for every allow-list gpuwatch reads), a gpuwatch flag. Which findings
need which signal is declared beside the findings (gpuwatch/findings/__init__.py, ``NEEDS``); the
store's coverage of each signal is analyses/signal_coverage.sql; ``gpuwatch doctor`` asks a
Prometheus the same question (gpuwatch/doctor.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch import fields

DCGM = "dcgm-exporter"
KSM = "kube-state-metrics"
GPUWATCH = "gpuwatch"
INPUT = "gpuwatch ingest"


@dataclass(frozen=True)
class Signal:
    """One kind of evidence. ``series``: any of these Prometheus names carries it (empty: not a series,
    an input file); ``per_node``: judged per GPU node (else for the whole cluster); ``enable``: the
    exact config that turns it on; ``where``: the file or values that config goes in."""

    name: str
    label: str
    source: str
    series: tuple[str, ...]
    enable: str
    where: str
    per_node: bool = True


def _names(field: str) -> tuple[str, ...]:
    """Every served name of DCGM ``field`` (all generations), from the field table."""
    return tuple(n.name for n in fields.NAMES.values() if n.field.id == fields.fid(field))


def _line(field: str) -> str:
    """The dcgm-exporter counters-file row that collects ``field`` (its type and help as served)."""
    found = next(f for f in fields.FIELDS if f.name == field)
    return f"{found.name}, {found.type}, {found.help}"


COUNTERS = "dcgm-exporter counters file (the GPU Operator's dcgmExporter.config ConfigMap, or -f FILE)"
# The kube-state-metrics Helm values (prometheus-community chart; under `kube-state-metrics:` in
# kube-prometheus-stack) that export every pod and node label and annotation gpuwatch reads.
KSM_VALUES = """\
metricLabelsAllowlist:
  - pods=[team,training.kubeflow.org/job-name,jobset.sigs.k8s.io/jobset-name,kueue.x-k8s.io/pod-group-name,volcano.sh/job-name]
  - nodes=[nvidia.com/gpu.replicas,karpenter.sh/capacity-type,karpenter.sh/nodepool]
metricAnnotationsAllowList:
  - pods=[scheduling.k8s.io/group-name,pod-group-name]
extraArgs:
  - --metric-opt-in-list=kube_pod_nodeselectors"""
KSM_WHERE = "kube-state-metrics Helm values (kube-prometheus-stack: under kube-state-metrics:)"
KSM_DEFAULT = "kube-state-metrics' pods collector (on by default): deploy kube-state-metrics and scrape it"

SIGNALS: dict[str, Signal] = {s.name: s for s in (
    Signal("reported", "GPU utilization (GPU_UTIL, GR_ENGINE_ACTIVE)", DCGM,
           _names("DCGM_FI_DEV_GPU_UTIL") + _names("DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
           _line("DCGM_FI_DEV_GPU_UTIL"), COUNTERS),
    Signal("sm_active", "SM activity (DCGM_FI_PROF_SM_ACTIVE)", DCGM, _names("DCGM_FI_PROF_SM_ACTIVE"),
           _line("DCGM_FI_PROF_SM_ACTIVE"), COUNTERS),
    Signal("tensor_active", "tensor activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", DCGM,
           _names("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), _line("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), COUNTERS),
    Signal("dram_active", "DRAM activity (DCGM_FI_PROF_DRAM_ACTIVE)", DCGM, _names("DCGM_FI_PROF_DRAM_ACTIVE"),
           _line("DCGM_FI_PROF_DRAM_ACTIVE"), COUNTERS),
    Signal("fb_used", "GPU memory used (DCGM_FI_DEV_FB_USED)", DCGM, _names("DCGM_FI_DEV_FB_USED"),
           _line("DCGM_FI_DEV_FB_USED"), COUNTERS),
    Signal("nvlink", "NVLink traffic (DCGM_FI_PROF_NVLINK_TX/RX_BYTES)", DCGM,
           _names("DCGM_FI_PROF_NVLINK_TX_BYTES") + _names("DCGM_FI_PROF_NVLINK_RX_BYTES"),
           _line("DCGM_FI_PROF_NVLINK_TX_BYTES") + "\n" + _line("DCGM_FI_PROF_NVLINK_RX_BYTES"), COUNTERS),
    Signal("health", "GPU health (DCGM_FI_DEV_XID_ERRORS)", DCGM, _names("DCGM_FI_DEV_XID_ERRORS"),
           _line("DCGM_FI_DEV_XID_ERRORS"), COUNTERS),
    Signal("ksm_pods", "pods (kube_pod_info)", KSM, ("kube_pod_info",), KSM_DEFAULT, KSM),
    Signal("ksm_labels", "pod labels (kube_pod_labels label_*)", KSM, ("kube_pod_labels",), KSM_VALUES, KSM_WHERE),
    Signal("ksm_status", "pod status (kube_pod_status_phase)", KSM, ("kube_pod_status_phase",), KSM_DEFAULT, KSM),
    Signal("ksm_requests", "GPU requests (kube_pod_container_resource_requests)", KSM,
           ("kube_pod_container_resource_requests",), KSM_DEFAULT, KSM),
    Signal("ksm_nodes", "node info (kube_node_labels)", KSM, ("kube_node_labels",),
           "kube-state-metrics' nodes collector (on by default), node labels allow-listed:\n" + KSM_VALUES, KSM_WHERE),
    Signal("pending", "pending pods (kube_pod_status_unschedulable, kube_pod_created)", KSM,
           ("kube_pod_created",), KSM_DEFAULT, KSM, per_node=False),
    Signal("topology", "GPU topology (gpuwatch_gpu_link_info, gpuwatch_gpu_numa_info)", GPUWATCH,
           ("gpuwatch_gpu_link_info", "gpuwatch_gpu_numa_info"),
           "gpuwatch ingest --from topo.txt --node NODE  (a saved 'nvidia-smi topo -m'), or gpuwatch's exporter "
           "(values: exporter.enabled: true)", "gpuwatch ingest / gpuwatch Helm values"),
    Signal("processes", "GPU processes (gpuwatch_process_memory_bytes)", GPUWATCH, ("gpuwatch_process_memory_bytes",),
           "gpuwatch's exporter with --proc-root (values: exporter.enabled: true)", "gpuwatch Helm values",
           ),
    Signal("prices", "GPU prices", INPUT, (),
           "gpuwatch ingest --prices prices.csv  (gpu_model, usd_per_gpu_hour), or --prices list (dated list prices)",
           "gpuwatch ingest / Helm values prices.models", per_node=False),
    Signal("teams", "teams (the team pod label, or namespace -> team)", INPUT, (),
           "the team pod label exported by kube-state-metrics:\n" + KSM_VALUES
           + "\nor gpuwatch ingest --teams teams.csv  (namespace, team)", KSM_WHERE, per_node=False),
)}


def enable(name: str) -> str:
    """The config that enables signal ``name``, with where it goes, as one text."""
    signal = SIGNALS[name]
    return f"{signal.where}:\n{signal.enable}"
