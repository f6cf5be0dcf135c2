"""Exporter series -> the bundle's ``processes`` frame: GPU compute processes and their pods.

``gpuwatch_process_memory_bytes{UUID, GPU_I_ID, pid, owner, pod_uid}`` (the exporter with
``--proc-root``): one row per (ts, device, pid) with the memory the process holds (bytes, as served),
``in_pod`` 1 with its ``pod_uid`` (owner ``pod``), 0 for a process in no pod's cgroup (``host``), empty
when the exporter could not read its cgroup (``unknown``: the orphaned-memory finding never judges
those). NaN and negative values are missing. A series without a device or a pid (a whole number up to
Linux' largest pid_max) is not loaded.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from gpuwatch.ingest.series import Series, device_of, first, nones, whole
from gpuwatch.model import BUNDLE_COLUMNS

NAME = "gpuwatch_process_memory_bytes"
PID_MAX = 4_194_304  # Linux' largest pid_max (2^22): a larger "pid" label is no process id
IN_POD = {"pod": 1, "host": 0}  # owner -> in_pod; "unknown" (or anything else) -> NULL


def processes_frame(series: Iterable[Series]):
    """The ``processes`` frame (model.BUNDLE_COLUMNS, ``ts`` in epoch seconds)."""
    import pandas as pd

    rows = []
    for s in series:
        if s.name != NAME or (device := device_of(s.labels)) is None:
            continue
        pid = whole(first(s.labels, "pid"), limit=PID_MAX)
        if pid is None:
            continue
        in_pod = IN_POD.get(first(s.labels, "owner") or "")
        pod_uid = first(s.labels, "pod_uid") if in_pod == 1 else None
        ok = np.isfinite(s.values) & (s.values >= 0)
        rows += [(t, *device, pid, pod_uid, in_pod, v) for t, v in zip(s.ts[ok].tolist(), s.values[ok].tolist(), strict=True)]
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["processes"]))
    frame = frame.astype({"ts": float, "mig_gi_id": "Int64", "pid": "Int64", "in_pod": "Int64", "fb_used_bytes": float})
    return nones(frame.sort_values(["ts", "node", "gpu_uuid", "pid"]).reset_index(drop=True), "node", "gpu_uuid", "pod_uid")
