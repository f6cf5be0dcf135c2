"""The failure modes ``build_fleet(failures=True)`` plants (gpuwatch.fleet.failures, failures_jobs).

Checks: deterministic from the seed; the workload is untouched (its pods, truth, states and
samples are those of ``build_fleet(failures=False)``, and everything planted lies on time that
fleet left unallocated); every planted instance is in ``Fleet.failures`` and shows in pod_status,
health and samples as sample_data/README.md describes, decoys on the wrong side of the analyses'
default thresholds (gpuwatch.analyses.params); a small fleet plants what fits; the written bundle,
failures.csv beside it, loads into the store.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.analyses.params import DEFAULTS
from gpuwatch.fleet import DRIFT_DRIVER, DRIVER, FAILURE_COLUMNS, build_fleet, iter_samples
from gpuwatch.fleet.catalog import EMPTY_FB_MIB
from gpuwatch.fleet.command import write_bundle
from gpuwatch.units import GIB, MIB


@pytest.fixture(scope="module")
def base():
    return build_fleet(gpus=64, seed=0, days=7)


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=64, seed=0, days=7, failures=True)


def _rows(fleet, finding: str, cause: str | None = None) -> list[dict]:
    return [r for r in fleet.failures if r["finding"] == finding and cause in (None, r["cause"])]


def _pod(fleet, namespace: str, name: str) -> tuple[int, object]:
    return next((i, p) for i, p in enumerate(fleet.pods) if (p.namespace, p.pod) == (namespace, name))


def _states(fleet, name: str) -> list[dict]:
    return sorted((r for r in fleet.pod_status if r["pod"] == name), key=lambda r: r["ts"])


def _samples(fleet, keep, *, step: float = 60.0) -> list[tuple]:
    """(segment, ts, signals) of the segments ``keep(segment)`` selects, on the bundle's grid."""
    only = dataclasses.replace(fleet, segments=tuple(s for s in fleet.segments if keep(s)))
    return list(iter_samples(only, np.arange(fleet.start, fleet.end, step)))


def _device_index(fleet, row: dict) -> int:
    return next(i for i, d in enumerate(fleet.devices) if (d.node, d.gpu_uuid, d.mig_gi_id) ==
                (row["node"], row["gpu_uuid"], row["mig_gi_id"]))


def test_same_seed_same_failures_other_seed_other_failures(fleet):
    again = build_fleet(gpus=64, seed=0, days=7, failures=True)
    assert again == fleet
    assert build_fleet(gpus=64, seed=1, days=7, failures=True).failures != fleet.failures


def test_every_failure_mode_and_decoy_is_planted(fleet):
    planted = {(r["finding"], r["cause"]) for r in fleet.failures}
    assert planted == {("driver_drift", DRIFT_DRIVER[0]), ("gang_stall", "siblings_pending"),
                       ("gang_stall", "siblings_started"), ("gang_stall", "straggler"),
                       ("mig_mismatch", "gpu_memory"), ("mig_mismatch", "host_memory"),
                       ("unhealthy_gpu", "hardware"), ("unhealthy_gpu", "application"),
                       ("orphaned_memory", "leaked"), ("orphaned_memory", "ghost_pod"),
                       ("orphaned_memory", "below_baseline"), ("orphaned_memory", "too_short"),
                       ("orphaned_memory", "process_of_ended_pod"), ("orphaned_memory", "host_process"),
                       ("orphaned_memory", "unknown_owner"), ("orphaned_memory", "host_process_short")}
    assert len(_rows(fleet, "mig_mismatch", "gpu_memory")) == 3 and len(_rows(fleet, "unhealthy_gpu", "hardware")) == 3
    assert all(tuple(r) == FAILURE_COLUMNS for r in fleet.failures)


def test_the_workload_is_what_it_was_without_failures(base, fleet):
    n = len(base.pods)
    assert fleet.pods[:n] == base.pods and fleet.truth[:n] == base.truth
    assert fleet.pod_status[:len(base.pod_status)] == base.pod_status
    assert [s for s in fleet.segments if s.pod is not None and s.pod < n] == [s for s in base.segments if s.pod is not None]
    drivers = {(d.driver_version, d.cuda_driver_version) for d in fleet.devices}
    assert drivers == {DRIVER, DRIFT_DRIVER} and {(d.driver_version, d.cuda_driver_version) for d in base.devices} == {DRIVER}
    strip = [(d.node, d.gpu_uuid, d.mig_gi_id, d.gpu_model, d.fb_total_bytes) for d in fleet.devices]
    assert strip == [(d.node, d.gpu_uuid, d.mig_gi_id, d.gpu_model, d.fb_total_bytes) for d in base.devices]
    free: dict[int, list] = {}
    for s in base.segments:
        if s.pod is None:
            free.setdefault(s.device, []).append((s.start, s.end))
    for s in fleet.segments:
        if s.pod is None or s.pod >= n:  # planted, or what is left of an unallocated segment
            assert any(lo <= s.start and s.end <= hi for lo, hi in _merged(free[s.device])), s


def test_workload_samples_are_identical(base, fleet):
    n = len(base.pods)
    before = {(s.device, s.pod, t): v for s, ts, v in _samples(base, lambda s: s.pod is not None, step=600.0)
              for t, v in zip(ts, _per_row(v), strict=True)}
    after = {(s.device, s.pod, t): v for s, ts, v in _samples(fleet, lambda s: s.pod is not None and s.pod < n,
                                                              step=600.0) for t, v in zip(ts, _per_row(v), strict=True)}
    assert before.keys() == after.keys() and len(before) > 70_000
    assert all(before[k] == after[k] for k in before)


def test_segments_still_tile_each_device(fleet):
    by_device: dict[int, list] = {}
    for s in fleet.segments:
        if s.share == 1.0:
            by_device.setdefault(s.device, []).append((s.start, s.end))
    for device, spans in by_device.items():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end, f"device {device} has overlapping occupants"
        if not any(s.share < 1 for s in fleet.segments if s.device == device):
            assert sum(e - s for s, e in spans) == pytest.approx(fleet.end - fleet.start), device


def test_mig_mismatch_pods_fill_their_instance_and_crash_loop(fleet):
    for row in _rows(fleet, "mig_mismatch"):
        index, pod = _pod(fleet, row["namespace"], row["pod"])
        device = fleet.devices[_device_index(fleet, row)]
        assert device.is_mig and pod.device_ids == (device.mig_uuid,) and pod.gpu_resource.startswith("nvidia.com/mig-")
        states = _states(fleet, pod.pod)
        crashes = [r for r in states if r["waiting_reason"] == "CrashLoopBackOff"]
        assert len(crashes) >= 2 and states[-1]["phase"] == "Failed" and max(r["restarts"] for r in states) >= 2
        runs = [(s, v) for s, _, v in _samples(fleet, lambda s, i=index: s.pod == i and s.kind != "idle")]
        peaks = [float(np.max(v["fb_used_bytes"])) / device.fb_total_bytes for _, v in runs]
        if row["cause"] == "gpu_memory":
            assert {(r["last_terminated_reason"], r["last_exit_code"]) for r in crashes} == {("Error", 1)}
            assert min(peaks) >= DEFAULTS["mismatch_mem_share"] and len(runs) == len(crashes) + 1
        else:
            assert {(r["last_terminated_reason"], r["last_exit_code"]) for r in crashes} == {("OOMKilled", 137)}
            assert max(peaks) < DEFAULTS["mismatch_mem_share"]


def test_driver_drift_nodes_fail_starts_far_more_often(fleet):
    (row,) = _rows(fleet, "driver_drift")
    bad = row["node"]
    model = next(d.gpu_model for d in fleet.devices if d.node == bad)
    assert {d.driver_version for d in fleet.devices if d.node == bad} == {DRIFT_DRIVER[0]} == {row["cause"]}
    driver = {d.node: d.driver_version for d in fleet.devices if d.gpu_model == model}
    starts: dict[str, list[bool]] = {}
    for pod in fleet.pods:
        if pod.node in driver and pod.start_ts > fleet.start:
            first = next((r["ts"] for r in _states(fleet, pod.pod) if r["last_exit_code"] not in (None, 0)
                          or r["waiting_reason"] == "CreateContainerError"), None)
            starts.setdefault(driver[pod.node], []).append(first is not None and first - pod.start_ts < 15 * 60)
    bad_rate, good_rate = np.mean(starts[DRIFT_DRIVER[0]]), np.mean(starts[DRIVER[0]])
    assert sum(starts[DRIFT_DRIVER[0]]) >= DEFAULTS["drift_min_failures"]
    assert bad_rate >= 5 * good_rate > 0, (bad_rate, good_rate)


def test_orphaned_memory_and_its_decoys(fleet):
    baseline = {False: DEFAULTS["orphan_gpu_baseline_bytes"], True: DEFAULTS["orphan_mig_baseline_bytes"]}
    ended = {(s.device, s.end) for s in fleet.segments if s.pod is not None}
    for row in _rows(fleet, "orphaned_memory"):
        d = _device_index(fleet, row)
        if row["cause"] in ("process_of_ended_pod", "host_process", "unknown_owner", "host_process_short"):
            continue  # the processes path: test_leaked_processes_are_held_on_gpus_allocated_again
        if row["cause"] == "ghost_pod":
            index, pod = _pod(fleet, row["namespace"], row["pod"])
            assert _states(fleet, pod.pod)[-1]["phase"] == "Succeeded"
            held = _samples(fleet, lambda s, i=index, end=pod.end_ts: s.pod == i and s.start >= end)
        else:
            held = _samples(fleet, lambda s, d=d: s.device == d and s.pod is None and s.fb_bytes != _empty(fleet, d))
        assert held and all((d, s.start) in ended for s, _, _ in held), "orphaned memory starts as a pod ends"
        assert any(_is(row["cause"], v["fb_used_bytes"], seconds=s.end - s.start, baseline=baseline[fleet.devices[d].is_mig])
                   for s, _, v in held), row


def _is(cause: str, fb: np.ndarray, *, seconds: float, baseline: float) -> bool:
    """Whether memory ``fb`` held for ``seconds`` is what ``cause`` says, against the analyses' defaults."""
    if cause in ("leaked", "ghost_pod"):
        return fb.min() >= 1.9 * GIB and fb.max() <= 20 * GIB and seconds >= 30 * 60
    if cause == "too_short":
        return fb.min() > baseline and seconds < DEFAULTS["orphan_min_seconds"]
    return 0 < fb.max() <= baseline and seconds >= 3600  # below_baseline


def _empty(fleet, device: int) -> float:
    return EMPTY_FB_MIB[fleet.devices[device].mig_placement_size] * MIB


def test_empty_devices_hold_the_captured_baseline(fleet):
    planted = {_device_index(fleet, r) for r in _rows(fleet, "orphaned_memory")}
    for s, _, v in _samples(fleet, lambda s: s.pod is None and s.device not in planted):
        device = fleet.devices[s.device]
        assert v["fb_used_bytes"].max() <= (26 * MIB if device.is_mig else 0), device


def test_gang_stall_holds_idle_gpus_while_siblings_stay_pending(fleet):
    (stall,) = _rows(fleet, "gang_stall", "siblings_pending")
    members = {r["pod"] for r in fleet.pod_status if r["job"] == stall["job"]}
    running = {p for p in members if any(r["phase"] == "Running" for r in _states(fleet, p))}
    pending = members - running
    assert len(running) == len(pending) == 2
    assert all(r["phase"] in ("Pending", "Failed") and r["gpu_request"] > 0 for p in pending for r in _states(fleet, p))
    assert not {p for p in pending if any(x.pod == p for x in fleet.pods)}, "Pending pods hold no GPU"
    for name in running:
        index, pod = _pod(fleet, stall["namespace"], name)
        assert (pod.end_ts - pod.start_ts) >= 2 * 3600
        for _, _, v in _samples(fleet, lambda s, i=index: s.pod == i):
            assert np.nanmax(v["gpu_util"]) < DEFAULTS["idle_below"]
    (decoy,) = _rows(fleet, "gang_stall", "siblings_started")
    rows = [r for r in fleet.pod_status if r["job"] == decoy["job"]]
    first_pending = min(r["ts"] for r in rows if r["phase"] == "Pending")
    last_running = max(min(r["ts"] for r in rows if r["pod"] == p and r["phase"] == "Running") for p in {r["pod"] for r in rows})
    assert 60 <= last_running - first_pending <= 10 * 60


def test_straggler_lags_its_peers_for_hours(fleet):
    (row,) = _rows(fleet, "gang_stall", "straggler")
    slow = _device_index(fleet, row)
    job_pods = {i for i, p in enumerate(fleet.pods) if p.owner_name == row["job"]}
    sm = {s.device: float(np.median(v["sm_active"])) for s, _, v in _samples(fleet, lambda s: s.pod in job_pods)}
    peers = [v for d, v in sm.items() if d != slow]
    assert len(peers) == 3 and min(peers) - sm[slow] >= DEFAULTS["straggler_gap"]
    (segment,) = [s for s in fleet.segments if s.device == slow and s.pod in job_pods]
    assert segment.end - segment.start >= 3 * 3600


def test_unhealthy_gpus_have_health_events_and_their_pods_fail(fleet):
    hardware_xids = {48, 63, 74, 79, 92, 94, 95}
    for row in _rows(fleet, "unhealthy_gpu"):
        events = [e for e in fleet.health if e["gpu_uuid"] == row["gpu_uuid"]]
        _, pod = _pod(fleet, row["namespace"], row["pod"])
        assert pod.device_ids == (row["gpu_uuid"],) and all(pod.start_ts < e["ts"] <= pod.end_ts for e in events)
        assert _states(fleet, pod.pod)[-1]["phase"] == "Failed"
        kinds = {(e["kind"], e["code"]) for e in events}
        if row["cause"] == "hardware":
            assert kinds & {("xid", x) for x in hardware_xids} and {k for k, _ in kinds} - {"xid"}
        else:
            assert kinds in ({("xid", 13)}, {("xid", 43)})


def test_a_small_fleet_plants_what_fits():
    small = build_fleet(gpus=8, seed=2, days=0.25, failures=True)
    base = build_fleet(gpus=8, seed=2, days=0.25)
    assert small.pods[:len(base.pods)] == base.pods and len(small.failures) < 19


def test_the_bundle_carries_the_failures_and_loads(fleet, tmp_path):
    counts = write_bundle(fleet, tmp_path, step=600.0, fmt="parquet", small_fmt="csv")
    failures = pd.read_csv(tmp_path / "failures.csv")
    assert tuple(failures.columns) == FAILURE_COLUMNS and len(failures) == len(fleet.failures) == counts["failures"]
    con = store.connect(None)
    loaded = store.load_bundle(con, tmp_path)
    assert loaded["pod_status"] == len(fleet.pod_status) and loaded["health"] == len(fleet.health)
    drivers = con.execute("SELECT DISTINCT driver_version, cuda_driver_version FROM devices").fetchall()
    assert set(drivers) == {DRIVER, DRIFT_DRIVER}
    phases = dict(con.execute("SELECT phase, count(*) FROM stg_pod_status GROUP BY phase").fetchall())
    assert set(phases) == {"Pending", "Running", "Succeeded", "Failed"}
    con.close()


def _merged(spans):
    out = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _per_row(values: dict) -> list[tuple]:
    return list(zip(*(np.nan_to_num(v, nan=-1.0) for v in values.values()), strict=True))


def test_leaked_processes_are_held_on_gpus_allocated_again(fleet):
    """The processes path's truth holds by the fleet's own rows: the leaking process's pod ended before
    its readings while another pod holds the GPU; the unknown-owner decoy has no in_pod."""
    pods = {p.pod_uid: p for p in fleet.pods}
    by_device: dict[str, list[dict]] = {}
    for row in fleet.processes:
        by_device.setdefault(row["gpu_uuid"], []).append(row)
    for row in [r for r in fleet.failures if r["cause"] in ("process_of_ended_pod", "host_process", "unknown_owner")]:
        rows = by_device[row["gpu_uuid"]]
        live = [p for p in fleet.pods if row["gpu_uuid"] in p.device_ids]
        leaks = [r for r in rows if r["in_pod"] != 1 or (r["pod_uid"] in pods and pods[r["pod_uid"]].end_ts <= r["ts"])]
        assert leaks, row
        for r in leaks:  # another pod holds the GPU at every leaked reading
            assert any(p.start_ts <= r["ts"] < (p.end_ts or fleet.end) for p in live), (row, r)
        if row["cause"] == "unknown_owner":
            assert {r["in_pod"] for r in leaks} == {None}
        if row["cause"] == "process_of_ended_pod":
            assert {pods[r["pod_uid"]].pod for r in leaks} == {row["pod"]}
