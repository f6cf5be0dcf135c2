"""The signals gpuwatch's findings judge with, each declared once: what carries it, and how to turn it on.

A signal is one kind of evidence (SM activity, the pods' team labels, GPU prices, ...). Each row says
which Prometheus series carry it (any one of ``series``; dcgm-exporter's names of every generation
come from the field table, gpuwatch/fields.py), whether it is read per GPU node, and the exact
config that enables it: a dcgm-exporter counters-file line, the kube-state-metrics Helm values
(``KSM_VALUES``, one snippet for every allow-list gpuwatch reads), a gpuwatch flag or value. Which findings
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
    an input file); ``label_prefix``: only a series with such a label does (``kube_pod_labels`` has
    ``label_*`` only for allow-listed keys); ``per_node``: judged per GPU node (else for the whole
    cluster); ``enable``: (where, exact config) that turns it on, alternatives in order."""

    name: str
    label: str
    source: str
    series: tuple[str, ...]
    enable: tuple[tuple[str, str], ...]
    per_node: bool = True
    label_prefix: str = ""


def _names(field: str) -> tuple[str, ...]:
    """Every served name of DCGM ``field`` (all generations), from the field table."""
    return tuple(n.name for n in fields.NAMES.values() if n.field.id == fields.fid(field))


def _counters(*names: str) -> tuple[tuple[str, str], ...]:
    """The dcgm-exporter counters-file rows that collect ``names`` (type and help as served)."""
    rows = [next(f for f in fields.FIELDS if f.name == name) for name in names]
    return ((COUNTERS, "\n".join(f"{f.name}, {f.type}, {f.help}" for f in rows)),)


COUNTERS = "dcgm-exporter counters file (GPU Operator: the ConfigMap named in dcgmExporter.config; else -f FILE)"
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
KSM_ALLOW = (("kube-state-metrics Helm values (kube-prometheus-stack: under kube-state-metrics:)", KSM_VALUES),)
KSM_ON = (("kube-state-metrics", "deploy kube-state-metrics (its pods and nodes collectors are on by default) "
                                 "and let Prometheus scrape it"),)
EXPORTER = ("gpuwatch Helm values", "exporter:\n  enabled: true")

SIGNALS: dict[str, Signal] = {s.name: s for s in (
    Signal("reported", "GPU utilization (GPU_UTIL, GR_ENGINE_ACTIVE)", DCGM,
           _names("DCGM_FI_DEV_GPU_UTIL") + _names("DCGM_FI_PROF_GR_ENGINE_ACTIVE"), _counters("DCGM_FI_DEV_GPU_UTIL")),
    Signal("sm_active", "SM activity (DCGM_FI_PROF_SM_ACTIVE)", DCGM, _names("DCGM_FI_PROF_SM_ACTIVE"),
           _counters("DCGM_FI_PROF_SM_ACTIVE")),
    Signal("tensor_active", "tensor activity (DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", DCGM,
           _names("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), _counters("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE")),
    Signal("dram_active", "DRAM activity (DCGM_FI_PROF_DRAM_ACTIVE)", DCGM, _names("DCGM_FI_PROF_DRAM_ACTIVE"),
           _counters("DCGM_FI_PROF_DRAM_ACTIVE")),
    Signal("fb_used", "GPU memory used (DCGM_FI_DEV_FB_USED)", DCGM, _names("DCGM_FI_DEV_FB_USED"),
           _counters("DCGM_FI_DEV_FB_USED")),
    Signal("nvlink", "NVLink traffic (DCGM_FI_PROF_NVLINK_TX/RX_BYTES)", DCGM,
           _names("DCGM_FI_PROF_NVLINK_TX_BYTES") + _names("DCGM_FI_PROF_NVLINK_RX_BYTES"),
           _counters("DCGM_FI_PROF_NVLINK_TX_BYTES", "DCGM_FI_PROF_NVLINK_RX_BYTES")),
    Signal("health", "GPU health (DCGM_FI_DEV_XID_ERRORS)", DCGM, _names("DCGM_FI_DEV_XID_ERRORS"),
           _counters("DCGM_FI_DEV_XID_ERRORS")),
    Signal("ksm_pods", "pods (kube_pod_info)", KSM, ("kube_pod_info",), KSM_ON),
    Signal("ksm_labels", "pod labels (kube_pod_labels label_*)", KSM, ("kube_pod_labels",), KSM_ALLOW,
           label_prefix="label_"),
    Signal("ksm_status", "pod status (kube_pod_status_phase)", KSM, ("kube_pod_status_phase",), KSM_ON),
    Signal("ksm_requests", "GPU requests (kube_pod_container_resource_requests)", KSM,
           ("kube_pod_container_resource_requests",), KSM_ON),
    Signal("ksm_nodes", "node info (kube_node_labels)", KSM, ("kube_node_labels",), KSM_ON + KSM_ALLOW),
    Signal("pending", "pending pods (kube_pod_created, kube_pod_status_unschedulable)", KSM, ("kube_pod_created",),
           KSM_ON, per_node=False),
    Signal("topology", "GPU topology (gpuwatch_gpu_link_info, gpuwatch_gpu_numa_info)", GPUWATCH,
           ("gpuwatch_gpu_link_info", "gpuwatch_gpu_numa_info"),
           (("gpuwatch ingest", "gpuwatch ingest --from topo.txt --node NODE --db STORE  (a saved 'nvidia-smi topo -m')"),
            EXPORTER)),
    Signal("processes", "GPU processes (gpuwatch_process_memory_bytes)", GPUWATCH, ("gpuwatch_process_memory_bytes",),
           (EXPORTER,)),
    Signal("prices", "GPU prices", INPUT, (),
           (("gpuwatch ingest", "gpuwatch ingest --prices prices.csv  (gpu_model, usd_per_gpu_hour), or --prices list "
                                "(dated list prices)"),), per_node=False),
    Signal("teams", "teams (a team pod label, or namespace -> team)", INPUT, (),
           (("gpuwatch ingest", "gpuwatch ingest --teams teams.csv  (namespace, team)"), *KSM_ALLOW), per_node=False),
)}


def enable(*names: str) -> list[str]:
    """The configs that enable signals ``names``, as text blocks "where:" then the config lines indented;
    each config once, configs that go in the same place under one heading."""
    places: dict[str, list[str]] = {}
    for where, text in dict.fromkeys(item for name in names for item in SIGNALS[name].enable):
        places.setdefault(where, []).append(text)
    return [f"{where}:\n" + "\n".join("  " + line for text in texts for line in text.splitlines())
            for where, texts in places.items()]
