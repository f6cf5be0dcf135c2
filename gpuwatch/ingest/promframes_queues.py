"""Batch schedulers' own gauges -> the bundle's ``scheduler_pending`` frame (where Kueue or Volcano runs).

- Kueue ``kueue_pending_workloads{cluster_queue, status}``: workloads waiting in a ClusterQueue,
  ``status`` active (waiting to be admitted) or inadmissible (cannot be admitted as things are);
- Volcano ``volcano_queue_pod_group_pending_count{queue_name}``: PodGroups pending in a queue (status
  pending), and ``volcano_unschedule_task_count{job_id}``: a job's tasks that failed to schedule
  (status unschedulable).

One row per series and sample (the gauges are few: one per queue or job); NaN and negative values are
missing, never 0. Everything else about pending demand comes from kube-state-metrics (promframes_status).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpuwatch.ingest.series import Series, first, nones
from gpuwatch.model import BUNDLE_COLUMNS

# served name -> (scheduler, unit, queue label, job label, fixed status or None = the series' status label)
GAUGES: dict[str, tuple[str, str, str | None, str | None, str | None]] = {
    "kueue_pending_workloads": ("kueue", "workloads", "cluster_queue", None, None),
    "volcano_queue_pod_group_pending_count": ("volcano", "pod_groups", "queue_name", None, "pending"),
    "volcano_unschedule_task_count": ("volcano", "tasks", None, "job_id", "unschedulable"),
}


def scheduler_pending_frame(series: Iterable[Series]):
    """The ``scheduler_pending`` frame (model.BUNDLE_COLUMNS, ``ts`` in epoch seconds)."""
    import pandas as pd

    rows = []
    for s in series:
        if s.name not in GAUGES:
            continue
        scheduler, unit, queue_label, job_label, status = GAUGES[s.name]
        queue = first(s.labels, queue_label) if queue_label else None
        job = first(s.labels, job_label) if job_label else None
        state = status or first(s.labels, "status")
        ok = np.isfinite(s.values) & (s.values >= 0)
        rows += [(t, scheduler, queue, job, state, unit, v) for t, v in zip(s.ts[ok].tolist(), s.values[ok].tolist(), strict=True)]
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["scheduler_pending"])).astype({"ts": float, "pending": float})
    keys = ["ts", "scheduler", "queue", "job", "status", "unit"]
    frame = frame.sort_values(keys, na_position="first").drop_duplicates(keys, keep="last").reset_index(drop=True)
    return nones(frame, "scheduler", "queue", "job", "status", "unit")
