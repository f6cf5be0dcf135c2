"""Pending demand from kube-state-metrics into ``pod_status`` (docs/architecture.md#topology).

Families, in the shapes KSM serves them (pod-metrics.md): ``kube_pod_status_unschedulable`` (1, only
while the scheduler cannot place the pod), ``kube_pod_created`` and ``kube_pod_status_scheduled_time``
(epoch seconds as values), ``kube_pod_container_resource_requests{resource}`` (KSM's sanitised names),
``kube_pod_nodeselectors{nodeselector_<key>}`` (opt-in; absent in KSM 1.9), beside the phase series.

- Change rows exactly, per label generation (KSM 2.x, ``exported_*`` under honorLabels: false, KSM 1.9
  without node selectors): a gang member Pending and unschedulable that then runs yields a Pending row
  (created_ts, unschedulable 1) and a Running row (scheduled_ts, unschedulable 0); a pod that waited to
  the end has only its Pending row; a scheduled-but-starting pod is Pending with unschedulable 0.
- unschedulable is NULL (unknown) where the family is in no input, never 0 by guess; a selector-less
  pod is ``{}`` where KSM serves the family, NULL where it does not.
- Resource names mapped back (nvidia.com/gpu, .shared, MIG profiles), others kept as given.
- A pod never placed holds no GPUs: it is in pod_status only, never in ``pods``.
- End to end: a saved /metrics file through ``gpuwatch ingest`` into stg_pod_status, and a REAL
  Prometheus backfilled with the same series, read by prometheus.fetch.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.cli import main
from gpuwatch.ingest import openmetrics, promfile
from gpuwatch.ingest.promframes_status import gpu_resource
from gpuwatch.model import BUNDLE_COLUMNS

T0 = 1_794_182_400.0  # 2026-11-09T00:00:00Z
STEP = 60.0
STEPS = 6
SELECTOR = {"nodeselector_nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3"}
# pod -> (container, resource, GPUs, created, pod-level labels/annotations, per step k: (phase, unschedulable,
# scheduled time or None)); the scheduled time is when the scheduler bound it, between two scrapes
STORY = {
    "gang-0": ("worker", "nvidia_com_gpu", 4, T0 - 300, {"annotation_pod_group_name": "pg-llm"},
               [("Pending", True, None)] * 3 + [("Running", False, T0 + 170)] * 3),
    "gang-1": ("worker", "nvidia_com_gpu", 4, T0 - 300, {"annotation_pod_group_name": "pg-llm"},
               [("Pending", True, None)] * STEPS),
    "mig-2": ("infer", "nvidia_com_mig_1g_10gb", 1, T0 - 90, {},
              [("Pending", False, T0 - 30)] * 2 + [("Running", False, T0 - 30)] * 4),
}


def _ident(pod: str, exported: bool) -> dict:
    if exported:
        return {"exported_namespace": "ml", "exported_pod": pod, "uid": f"u-{pod}"} | openmetrics.KSM_TARGET
    return {"namespace": "ml", "pod": pod, "uid": f"u-{pod}"}


def _families(generation: str) -> openmetrics.Families:
    """The pods of STORY as KSM ``generation`` serves them, one sample per step."""
    exported, selectors = generation == "exported", generation != "ksm-1.9"
    out: openmetrics.Families = {}

    def add(name, labels, k, value):
        out.setdefault(name, []).append((labels, np.array([T0 + k * STEP]), np.array([float(value)])))

    for pod, (container, resource, gpus, created, meta, steps) in STORY.items():
        ident = _ident(pod, exported)
        c_key = "exported_container" if exported else "container"
        for k, (phase, unschedulable, scheduled) in enumerate(steps):
            for p in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
                add("kube_pod_status_phase", ident | {"phase": p}, k, p == phase)
            add("kube_pod_created", ident, k, created)
            node = "n1" if scheduled is not None else ""
            add("kube_pod_info", ident | {"node": node, "priority_class": ""}, k, 1)
            add("kube_pod_container_resource_requests", ident | {c_key: container, "node": node, "resource": resource,
                                                                 "unit": "integer"}, k, gpus)
            add("kube_pod_container_resource_requests", ident | {c_key: container, "node": node, "resource": "cpu",
                                                                 "unit": "core"}, k, 8)
            if meta:
                add("kube_pod_annotations", ident | meta, k, 1)
            if unschedulable:
                add("kube_pod_status_unschedulable", ident, k, 1)
            if scheduled is not None:
                add("kube_pod_status_scheduled_time", ident, k, scheduled)
            if selectors:
                add("kube_pod_nodeselectors", ident | (SELECTOR if resource == "nvidia_com_gpu" else {}), k, 1)
    return out


def _page(families: openmetrics.Families) -> str:
    """Families as a /metrics page with millisecond timestamps (one line per sample)."""
    lines = []
    for name, items in families.items():
        for labels, ts, values in items:
            body = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines += [f"{name}{{{body}}} {float(v)!r} {int(t * 1000)}" for t, v in zip(ts, values, strict=True)]
    lines.append(f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",UUID="GPU-1",modelName="NVIDIA H100 80GB HBM3",hostname="n1"}} 0 {int(T0 * 1000)}')
    return "\n".join(lines) + "\n"


def _expected(generation: str) -> pd.DataFrame:
    """One row at each pod's first step and wherever its state changes."""
    selectors = generation != "ksm-1.9"
    rows = []
    for pod, (container, resource, gpus, created, meta, steps) in STORY.items():
        before = None
        for k, (phase, unschedulable, scheduled) in enumerate(steps):
            selector = (json.dumps({"nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3"}) if resource == "nvidia_com_gpu"
                        else "{}") if selectors else None
            state = (phase, None, None, None, None, meta.get("annotation_pod_group_name"), float(gpus), created,
                     scheduled, int(unschedulable), {"nvidia_com_gpu": "nvidia.com/gpu"}.get(resource, "nvidia.com/mig-1g.10gb"),
                     selector)
            if state != before:
                rows.append((T0 + k * STEP, "ml", pod, container, *state))
                before = state
    frame = pd.DataFrame(rows, columns=list(BUNDLE_COLUMNS["pod_status"])).astype(
        {"restarts": "Int64", "last_exit_code": "Int64", "gpu_request": float, "created_ts": float,
         "scheduled_ts": float, "unschedulable": "Int64"})
    for column in ("ts", "created_ts", "scheduled_ts"):
        frame[column] = pd.to_datetime(frame[column], unit="s", utc=True)
    for column in ("namespace", "pod", "container", "phase", "last_terminated_reason", "waiting_reason", "job",
                   "gpu_resource", "node_selector"):
        frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame.sort_values(["namespace", "pod", "ts"]).reset_index(drop=True)


def _status(frames) -> pd.DataFrame:
    return frames["pod_status"].sort_values(["namespace", "pod", "ts"]).reset_index(drop=True)


@pytest.mark.parametrize("generation", ["ksm-2", "exported", "ksm-1.9"])
def test_pending_then_running_gives_exact_change_rows(generation):
    frames = promfile.parse(_page(_families(generation)), at=T0)
    pd.testing.assert_frame_equal(_status(frames), _expected(generation))


def test_the_gang_member_that_ran_has_created_and_scheduled_times():
    rows = _status(promfile.parse(_page(_families("ksm-2")), at=T0))
    gang = rows[rows["pod"] == "gang-0"]
    assert gang[["phase", "unschedulable"]].values.tolist() == [["Pending", 1], ["Running", 0]]
    assert (gang["created_ts"] == pd.Timestamp(T0 - 300, unit="s", tz="UTC")).all()
    assert gang["scheduled_ts"].isna().tolist() == [True, False]
    assert gang["scheduled_ts"].iloc[1] == pd.Timestamp(T0 + 170, unit="s", tz="UTC")


def test_a_pod_never_placed_is_demand_not_an_allocation():
    frames = promfile.parse(_page(_families("ksm-2")), at=T0)
    assert sorted(frames["pods"]["pod"]) == ["gang-0", "mig-2"]  # gang-1 waited throughout: it held no GPU
    assert "gang-1" in set(frames["pod_status"]["pod"])


def test_unschedulable_is_unknown_without_the_family_never_a_guessed_zero():
    families = {k: v for k, v in _families("ksm-2").items() if k != "kube_pod_status_unschedulable"}
    got = _status(promfile.parse(_page(families), at=T0))
    assert got["unschedulable"].isna().all()
    assert got["created_ts"].notna().all()  # the other pending columns are still read


def test_node_selector_is_unknown_without_the_family_and_empty_without_a_selector():
    got = _status(promfile.parse(_page(_families("ksm-2")), at=T0)).drop_duplicates("pod").set_index("pod")
    assert got["node_selector"].map(lambda s: s if s is None else json.loads(s)).to_dict() == {
        "gang-0": {"nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3"},
        "gang-1": {"nvidia_com_gpu_product": "NVIDIA-H100-80GB-HBM3"}, "mig-2": {}}


@pytest.mark.parametrize(("ksm", "name"), [
    ("nvidia_com_gpu", "nvidia.com/gpu"), ("nvidia_com_gpu_shared", "nvidia.com/gpu.shared"),
    ("nvidia_com_mig_1g_10gb", "nvidia.com/mig-1g.10gb"), ("nvidia_com_mig_3g_40gb", "nvidia.com/mig-3g.40gb"),
    ("nvidia_com_mig_7g_141gb", "nvidia.com/mig-7g.141gb"),
    ("nvidia_com_vgpu_a100", "nvidia_com_vgpu_a100"),  # unknown: its dots and dashes cannot be told back
    ("nvidia.com/gpu", "nvidia.com/gpu")])
def test_resource_names_are_mapped_back_where_known(ksm, name):
    assert gpu_resource(ksm) == name


def test_several_gpu_resources_are_all_named():
    ident = '{namespace="ml",pod="mixed",uid="u",container="c",resource="%s"}'
    page = "\n".join([f"kube_pod_container_resource_requests{ident % 'nvidia_com_gpu'} 1",
                      f"kube_pod_container_resource_requests{ident % 'nvidia_com_mig_1g_10gb'} 2",
                      'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1",hostname="n1"} 0']) + "\n"
    row = promfile.parse(page, at=T0)["pod_status"].iloc[0]
    assert (row["gpu_resource"], row["gpu_request"]) == ("nvidia.com/gpu,nvidia.com/mig-1g.10gb", 3.0)


def test_a_kai_pod_group_is_the_job():
    rows = _status(promfile.parse(_page(_families("exported")), at=T0))
    assert rows.set_index("pod")["job"].to_dict() == {"gang-0": "pg-llm", "gang-1": "pg-llm", "mig-2": None}


def test_saved_metrics_file_into_the_store(tmp_path, capsys):
    page, db = tmp_path / "ksm.prom", tmp_path / "s.duckdb"
    page.write_text(_page(_families("ksm-2")))
    assert main(["ingest", "--db", str(db), "--from", str(page)]) == 0
    con = store.connect(str(db), read_only=True)
    try:
        staged = con.execute("SELECT pod, phase, unschedulable, epoch(created_ts), epoch(scheduled_ts), gpu_resource, "
                             "node_selector ->> 'nvidia_com_gpu_product', epoch(ts), epoch(until_ts) FROM stg_pod_status "
                             "ORDER BY pod, ts").fetchall()
        pods = con.execute("SELECT pod FROM pods ORDER BY pod").fetchall()
    finally:
        con.close()
    product, t = "NVIDIA-H100-80GB-HBM3", [T0 + k * STEP for k in range(STEPS)]
    assert staged == [
        ("gang-0", "Pending", 1, T0 - 300, None, "nvidia.com/gpu", product, t[0], t[3]),
        ("gang-0", "Running", 0, T0 - 300, T0 + 170, "nvidia.com/gpu", product, t[3], None),
        ("gang-1", "Pending", 1, T0 - 300, None, "nvidia.com/gpu", product, t[0], None),
        ("mig-2", "Pending", 0, T0 - 90, T0 - 30, "nvidia.com/mig-1g.10gb", None, t[0], t[2]),
        ("mig-2", "Running", 0, T0 - 90, T0 - 30, "nvidia.com/mig-1g.10gb", None, t[2], None)]
    assert pods == [("gang-0",), ("mig-2",)]


@pytest.mark.slow
def test_real_prometheus_end_to_end(tmp_path):
    from gpuwatch.ingest import prometheus
    from tests.support.prometheus import backfill, running

    plain, exported = _families("ksm-2"), _families("exported")
    for families, namespace in ((exported, "ml-x"), ):  # the exported generation under its own namespace
        for items in families.values():
            for labels, _, _ in items:
                labels["exported_namespace"] = namespace
    gpu = {"DCGM_FI_DEV_GPU_UTIL": [({"gpu": "0", "UUID": "GPU-1", "modelName": "NVIDIA H100 80GB HBM3", "hostname": "n1"},
                                     T0 + STEP * np.arange(STEPS), np.zeros(STEPS))]}
    path = tmp_path / "ksm.om"
    openmetrics.write(path, plain, exported, gpu)
    backfill(path, tmp_path / "tsdb")
    with running(tmp_path, tsdb=tmp_path / "tsdb") as server:
        frames = prometheus.fetch(server.url, start=T0, end=T0 + STEPS * STEP, step=STEP)
    expected = pd.concat([_expected("ksm-2"), _expected("exported").assign(namespace="ml-x")])
    pd.testing.assert_frame_equal(_status(frames), expected.sort_values(["namespace", "pod", "ts"]).reset_index(drop=True))
    assert sorted(zip(frames["pods"]["namespace"], frames["pods"]["pod"], strict=True)) == [
        ("ml", "gang-0"), ("ml", "mig-2"), ("ml-x", "gang-0"), ("ml-x", "mig-2")]

    con = store.connect(None)
    store.load(con, frames, source="prometheus")
    waited = con.execute("SELECT namespace, phase, unschedulable, epoch(created_ts), until_ts FROM stg_pod_status "
                         "WHERE pod = 'gang-1' ORDER BY namespace").fetchall()
    assert waited == [("ml", "Pending", 1, T0 - 300, None), ("ml-x", "Pending", 1, T0 - 300, None)]


def test_a_pod_deleted_while_pending_ends_with_an_unknown_row():
    """Its series stop two steps before the read window's end: the last row, one step after its last
    sample, has every state column empty (unknown), so nobody counts it as waiting to the end."""
    from gpuwatch.ingest.promframes_status import pod_status_frame
    from gpuwatch.ingest.series import Context, Series

    ident = {"namespace": "ml", "pod": "cancelled", "uid": "u-c"}
    ts = T0 + STEP * np.arange(4)
    series = [Series("kube_pod_status_phase", ident | {"phase": "Pending"}, ts, np.ones(4)),
              Series("kube_pod_status_phase", ident | {"phase": "Running"}, ts, np.zeros(4)),
              Series("kube_pod_container_resource_requests", ident | {"container": "main", "resource": "nvidia_com_gpu",
                                                                      "unit": "integer"}, ts, np.full(4, 8.0))]
    frame = pod_status_frame(series, Context(window_end=T0 + 6 * STEP, step=STEP))
    assert frame["ts"].tolist() == [T0, T0 + 4 * STEP]
    assert frame.iloc[0]["phase"] == "Pending" and frame.iloc[0]["gpu_request"] == 8.0
    assert frame.iloc[1].drop(["ts", "namespace", "pod", "container"]).isna().all()
    # a pod reported to the window's end, and a saved page (no window), get no such row
    assert len(pod_status_frame(series, Context(window_end=T0 + 4 * STEP, step=STEP))) == 1
    assert len(pod_status_frame(series, Context())) == 1
