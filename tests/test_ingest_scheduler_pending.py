"""The batch schedulers' own pending gauges (Kueue ``kueue_pending_workloads``, Volcano
``volcano_queue_pod_group_pending_count`` and ``volcano_unschedule_task_count``) reach the store's
``scheduler_pending`` table through a saved /metrics page and a real Prometheus (Debian's, backfilled
with promtool); NaN samples are dropped, never 0; bad rows are one-line errors naming file, column and row.
The series shapes are the schedulers' documented ones (Kueue pkg/metrics, Volcano docs/design/metrics.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.ingest import openmetrics, promfile
from gpuwatch.ingest.promframes_queues import scheduler_pending_frame
from gpuwatch.ingest.series import Series
from gpuwatch.store.validate import BundleError

T0, STEP, STEPS = 1_794_200_000.0, 60.0, 5
GPU = {"DCGM_FI_DEV_GPU_UTIL": [({"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H100 80GB HBM3", "hostname": "n1"},
                                 T0 + STEP * np.arange(STEPS), np.zeros(STEPS))]}
TARGET = {"job": "kueue-controller-manager", "instance": "10.0.0.9:8080"}


def _gauges() -> openmetrics.Families:
    ts = T0 + STEP * np.arange(STEPS)
    return {
        "kueue_pending_workloads": [
            ({"cluster_queue": "gpu-a100", "status": "active"} | TARGET, ts, np.array([3.0, 3, 2, 2, 0])),
            ({"cluster_queue": "gpu-a100", "status": "inadmissible"} | TARGET, ts, np.array([1.0, 1, 1, np.nan, 1])),
        ],
        "volcano_queue_pod_group_pending_count": [({"queue_name": "research"}, ts, np.array([0.0, 2, 2, 2, 2]))],
        "volcano_unschedule_task_count": [({"job_id": "ml/llm-pretrain"}, ts, np.array([8.0, 8, 4, 0, 0]))],
    }


def _rows(frame: pd.DataFrame) -> set[tuple]:
    return {(round(float(t), 3), s, q, j, st, u, p) for t, s, q, j, st, u, p in frame.itertuples(index=False, name=None)}


def test_gauges_become_rows_per_series_and_sample():
    series = [Series(name, labels, ts, values) for name, items in _gauges().items() for labels, ts, values in items]
    frame = scheduler_pending_frame(series)
    assert len(frame) == 4 * STEPS - 1  # the NaN sample is missing, not 0
    rows = _rows(frame)
    assert (T0, "kueue", "gpu-a100", None, "active", "workloads", 3.0) in rows
    assert (T0 + 3 * STEP, "kueue", "gpu-a100", None, "inadmissible", "workloads", 1.0) not in rows
    assert (T0 + STEP, "volcano", "research", None, "pending", "pod_groups", 2.0) in rows
    assert (T0 + 2 * STEP, "volcano", None, "ml/llm-pretrain", "unschedulable", "tasks", 4.0) in rows


def test_saved_metrics_page_loads_into_the_store(tmp_path):
    lines = []  # a /metrics page with millisecond timestamps, one line per sample
    for name, items in (_gauges() | GPU).items():
        for labels, ts, values in items:
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines += [f"{name}{{{body}}} {float(v)!r} {int(t * 1000)}" for t, v in zip(ts, values, strict=True)]
    frames = promfile.parse("\n".join(lines) + "\n", at=T0, source="page.prom")
    con = store.connect(None)
    store.load(con, frames, source="page.prom")
    got = con.execute("SELECT scheduler, queue, job, status, unit, sum(pending), count(*) FROM stg_scheduler_pending "
                      "GROUP BY ALL ORDER BY 1, 2, 3, 4").fetchall()
    assert got == [("kueue", "gpu-a100", None, "active", "workloads", 10.0, 5),
                   ("kueue", "gpu-a100", None, "inadmissible", "workloads", 4.0, 4),
                   ("volcano", "research", None, "pending", "pod_groups", 8.0, 5),
                   ("volcano", None, "ml/llm-pretrain", "unschedulable", "tasks", 20.0, 5)]


@pytest.mark.parametrize(("row", "message"), [
    ({"scheduler": "yunikorn", "unit": "workloads", "pending": 1}, "column 'scheduler', row 1: 'yunikorn' is not one of kueue, volcano"),
    ({"scheduler": "kueue", "unit": "jobs", "pending": 1}, "column 'unit', row 1: 'jobs' is not one of workloads, pod_groups, tasks"),
    ({"scheduler": "kueue", "unit": "workloads", "pending": -1}, "column 'pending', row 1: negative value"),
])
def test_bad_rows_name_column_and_row_and_leave_the_store_alone(row, message):
    con = store.connect(None)
    with pytest.raises(BundleError, match=message):
        store.load(con, {"scheduler_pending": pd.DataFrame([{"ts": T0, **row}]),
                         "devices": pd.DataFrame([{"node": "n", "gpu_uuid": "g", "gpu_model": "m"}])}, source="t")
    assert con.execute("SELECT (SELECT count(*) FROM scheduler_pending) + (SELECT count(*) FROM devices)").fetchone() == (0,)


@pytest.mark.slow
def test_real_prometheus_end_to_end(tmp_path):
    from gpuwatch.ingest import prometheus
    from tests.support.prometheus import backfill, running

    path = tmp_path / "queues.om"
    openmetrics.write(path, _gauges(), GPU)
    backfill(path, tmp_path / "tsdb")
    with running(tmp_path, tsdb=tmp_path / "tsdb") as server:
        frames = prometheus.fetch(server.url, start=T0, end=T0 + STEPS * STEP, step=STEP)
    series = [Series(name, labels, ts, values) for name, items in _gauges().items() for labels, ts, values in items]
    assert _rows(frames["scheduler_pending"].assign(ts=lambda f: f["ts"].map(lambda t: t.timestamp()))) == \
        _rows(scheduler_pending_frame(series))
