"""A GPU-Operator-shaped cluster's Prometheus history, for tests of the day-one path.

What a cluster running NVIDIA's GPU Operator and a stock kube-state-metrics serves, written as
OpenMetrics for ``promtool tsdb create-blocks-from openmetrics`` (tests/support/prometheus.py):

- dcgm-exporter with its DEFAULT counters (dcgm-exporter's etc/default-counters.csv, as
  tests/fixtures/counters/default.csv and the L40S capture in tests/fixtures/dcgm-exporter show):
  GPU_UTIL, FB_USED/FREE, power, GR_ENGINE, tensor and DRAM activity, XID errors; NOT
  DCGM_FI_PROF_SM_ACTIVE / SM_OCCUPANCY / NVLINK_TX/RX_BYTES (commented out upstream). Labels as
  dcgm-exporter <= 4.5.3-4.8.2 serves them (``Hostname``) and as Prometheus stores them under the
  operator's ServiceMonitor (``honorLabels: false``): the workload in ``exported_pod`` /
  ``exported_namespace`` / ``exported_container``, the exporter pod's own target labels beside;
- kube-state-metrics as deployed by default: every pod's info, owner, requests, start, status, and
  ``kube_pod_labels`` WITHOUT any ``label_*`` (no ``--metric-labels-allowlist``), ``kube_node_labels``
  likewise without labels (scraped with honor labels, as kube-prometheus-stack does);
- no gpuwatch_* series (gpuwatch's exporter is not installed): no topology, no processes.

The fleet is gpuwatch.fleet's (deterministic): its false-utilization offenders are real (SM activity
low while GPU_UTIL is high), so a store with SM activity would find them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gpuwatch.fleet import build_fleet, iter_samples
from gpuwatch.fleet import command as simulate
from gpuwatch.ingest import openmetrics

STEP = 60.0
# the dcgm-exporter pod's own labels, which Prometheus attaches under honorLabels: false
TARGET = {"pod": "nvidia-dcgm-exporter-7xq2k", "namespace": "gpu-operator", "container": "nvidia-dcgm-exporter",
          "instance": "10.0.1.5:9400", "job": "nvidia-dcgm-exporter"}
NOT_DEFAULT = ("sm_active", "sm_occupancy", "nvlink_tx_bytes_per_second", "nvlink_rx_bytes_per_second")


def fleet_and_window(*, gpus: int = 16, seed: int = 2, hours: float = 6.0):
    fleet = build_fleet(gpus=gpus, seed=seed, days=1)
    start = fleet.start + 12 * 3600
    return fleet, (start, start + hours * 3600)


def samples(fleet, grid: np.ndarray) -> pd.DataFrame:
    """The fleet's samples on ``grid`` as dcgm-exporter reads them (NVLink per GPU, never per MIG instance)."""
    parts = []
    for segment, ts, cols in iter_samples(fleet, grid):
        d, pod = fleet.devices[segment.device], None if segment.pod is None else fleet.pods[segment.pod]
        parts.append(pd.DataFrame(cols | {"ts": ts}).assign(
            node=d.node, gpu_uuid=d.gpu_uuid, mig_gi_id=d.mig_gi_id, pod=pod.pod if pod else None,
            namespace=pod.namespace if pod else None, container=pod.container if pod else None))
    return pd.concat(parts, ignore_index=True)


def write(tmp: Path, fleet, window: tuple[float, float]) -> list[Path]:
    """The OpenMetrics files of the cluster's history over ``window`` (a margin either side)."""
    grid = np.arange(window[0] - 600, window[1] + 600, STEP)
    devices = simulate.devices_frame(fleet)
    frame = samples(fleet, grid).assign(**dict.fromkeys(NOT_DEFAULT, np.nan))
    dcgm = openmetrics.sample_families(devices, frame, hostname_label="Hostname", exported=True)
    xid = {}
    for d in devices.itertuples(index=False):
        if pd.isna(d.mig_gi_id):
            labels = {"gpu": str(int(d.gpu_index)), "UUID": d.gpu_uuid, "device": f"nvidia{int(d.gpu_index)}",
                      "modelName": d.gpu_model, "Hostname": d.node}
            xid.setdefault("DCGM_FI_DEV_XID_ERRORS", []).append((labels, grid, np.zeros(len(grid))))
    dcgm = {name: [(labels | TARGET, ts, values) for labels, ts, values in series]
            for name, series in (dcgm | xid).items()}
    pods = pd.DataFrame([p.bundle_row() for p in fleet.pods]).assign(team=None, labels=None)
    status = simulate.pod_status_frame(fleet, fmt="parquet")
    nodes = {"kube_node_labels": [({"node": n}, grid, np.ones(len(grid))) for n in fleet.nodes()],
             "kube_pod_created": [({"namespace": p.namespace, "pod": p.pod, "uid": p.pod_uid or ""}, t,
                                   np.full(len(t), round(p.start_ts)))
                                  for p in fleet.pods if len(t := grid[grid >= p.start_ts])]}
    paths = [tmp / "dcgm-exporter.om", tmp / "kube-state-metrics.om"]
    openmetrics.write(paths[0], dcgm)
    ksm = openmetrics.ksm_status_families(status, grid)
    ksm["kube_pod_labels"] = [({k: v for k, v in labels.items() if not k.startswith("label_")}, ts, values)
                              for labels, ts, values in ksm.get("kube_pod_labels", [])]  # no allow-list
    openmetrics.write(paths[1], openmetrics.ksm_families(pods, grid), ksm, nodes)
    return paths
