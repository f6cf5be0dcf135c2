"""Failure-mode findings on hand-built bundles, run the way `gpuwatch analyze` runs them (analyses.run
with the default params): unhealthy_gpu (severity classes, holders incl. MIG instances and a stale
kubelet listing, cost at risk to the cent), orphaned_memory (positive runs, near-misses, MIG baseline,
NULL memory, and a property test against a brute-force scan of random sample sequences) and
driver_drift (blamed version, evenly spread failures, too few failures, one version, unknown driver).
"""

from __future__ import annotations

import itertools
import json
import statistics

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store
from gpuwatch.analyses.params import DEFAULTS, OPTIONS, params
from gpuwatch.store import rollup

T0 = pd.Timestamp("2026-11-09T00:00:00")
H, MIN = pd.Timedelta(hours=1), pd.Timedelta(minutes=1)
MIB, GIB = 2**20, 2**30
NAMES = ("unhealthy_gpu", "orphaned_memory", "driver_drift")
PRICES = [{"gpu_model": "H100", "usd_per_gpu_hour": 4.0}, {"gpu_model": "A100", "usd_per_gpu_hour": 2.5}]
MIG = {"gpu_model": "A100", "mig_profile": "3g.40gb", "mig_profile_id": 9, "mig_placement_size": 4}


def _store(**frames):
    con = store.connect(None)
    store.load(con, {name: pd.DataFrame(rows) for name, rows in frames.items() if rows}, source="test")
    return con


def _run(con, name, *, hours=10, **overrides):
    return analyses.run(con, name, **params(T0, T0 + hours * H, **overrides))


def _na(value):
    """None for a missing cell (NaN, NA, NaT), else the value: rows compare as plain tuples."""
    return None if pd.isna(value) else value


def _pod(namespace, pod, node, devices, start, end=None, **extra):
    return {"namespace": namespace, "pod": pod, "node": node, "device_ids": devices, "start_ts": start,
            "end_ts": end, "gpu_count": 1.0, "gpu_resource": "nvidia.com/gpu", **extra}


def _series(gpu, minutes, *, pod=None, fb=None, mig=None, node="n1", step=MIN):
    return [{"ts": T0 + m * step, "node": node, "gpu_uuid": gpu, "mig_gi_id": mig, "namespace": pod and "ns",
             "pod": pod, "gpu_util": 0.5, "fb_used_bytes": fb} for m in minutes]


# --- unhealthy_gpu -------------------------------------------------------------------------------

def _unhealthy_store():
    devices = [{"node": "n1", "gpu_uuid": g, "gpu_model": "H100"} for g in ("GPU-a", "GPU-b")]
    devices += [{"node": "n1", "gpu_uuid": "GPU-m", "gpu_model": "A100"},
                {"node": "n1", "gpu_uuid": "GPU-m", "mig_gi_id": 1, "mig_placement_start": 0, **MIG},
                {"node": "n1", "gpu_uuid": "GPU-m", "mig_gi_id": 2, "mig_placement_start": 4, **MIG},
                {"node": "n2", "gpu_uuid": "GPU-c", "gpu_model": "Mystery"}]  # no price
    mig = {"gpu_resource": "nvidia.com/mig-3g.40gb"}
    pods = [_pod("ns-a", "train-1", "n1", "GPU-a", T0, T0 + 6 * H, team="alpha"),
            _pod("ns-b", "train-2", "n1", "GPU-a", T0 + 7 * H, team="beta"),
            _pod("ns-a", "old", "n1", "GPU-b", T0 - 2 * H, T0 + 3 * H),
            _pod("ns-m", "infer", "n1", "MIG-5f2c0d1e", T0, T0 + 5 * H, **mig),  # modern id: samples place it
            _pod("ns-m", "legacy", "n1", "MIG-GPU-m/2/0", T0 + H, T0 + 3 * H, **mig),
            _pod("ns-c", "job", "n2", "GPU-c", T0, T0 + 8 * H)]
    samples = [{**row, "namespace": "ns-m"} for row in _series("GPU-m", range(30), pod="infer", mig=1, step=10 * MIN)]
    # the kubelet still lists the ended pod on GPU-b: not a hold
    samples += [{**row, "namespace": "ns-a"} for row in _series("GPU-b", range(240, 300), pod="old")]
    events = [("GPU-a", "xid", 13, 1), ("GPU-a", "xid", 79, 2), ("GPU-a", "xid", 79, 3), ("GPU-a", "xid", 79, -1),
              ("GPU-b", "ecc_dbe", 2, 4), ("GPU-b", "ecc_dbe", 3, 6), ("GPU-m", "lost", None, 2), ("GPU-c", "xid", 48, 1), ("GPU-a", "xid", 999, 5)]
    health = [{"ts": T0 + h * H, "node": "n2" if g == "GPU-c" else "n1", "gpu_uuid": g, "kind": k, "code": c}
              for g, k, c, h in events]
    return _store(devices=devices, pods=pods, samples=samples, health=health, prices=PRICES)


def test_unhealthy_gpu_rows_holders_and_cost_at_risk():
    frame = _run(_unhealthy_store(), "unhealthy_gpu")
    got = [(r.gpu_uuid, r.kind, _na(r.code), r.severity, r.events, r.pods, r.teams,
            _na(round(r.allocated_usd_at_risk, 2)))
           for r in frame.itertuples()]
    held_a = "ns-a/train-1,ns-b/train-2"
    assert got == [
        ("GPU-c", "xid", 48, "hardware", 1, "ns-c/job", "ns-c", None),            # held, unpriced: never $0
        ("GPU-a", "xid", 79, "hardware", 2, held_a, "alpha,beta", 32.00),         # 8 h x $4 (event before window out)
        ("GPU-m", "lost", None, "hardware", 1, "ns-m/infer,ns-m/legacy", "ns-m", 7.50),  # to T0+5h: 3 h x $2.50
        ("GPU-b", "ecc_dbe", 5, "hardware", 2, "", "", 0.00),   # one row: 2 events, 5 double-bit errors; unallocated
        ("GPU-a", "xid", 999, "unknown", 1, held_a, "alpha,beta", 20.00),         # 5 h x $4
        ("GPU-a", "xid", 13, "application", 1, held_a, "alpha,beta", 36.00),      # 9 h x $4
    ]
    a79 = frame[(frame["gpu_uuid"] == "GPU-a") & (frame["code"] == 79)].iloc[0]
    assert (a79["first_ts"], a79["last_ts"], a79["at_risk_hours"]) == (T0 + 2 * H, T0 + 3 * H, 8.0)
    assert a79["recommendation"] == "cordon, drain and RMA/reset the GPU"
    assert frame.iloc[-1]["recommendation"] == "check the workload (XID 13 is usually an application fault)"
    assert frame[frame["gpu_uuid"] == "GPU-b"].iloc[0]["at_risk_hours"] == 0


# --- orphaned_memory -----------------------------------------------------------------------------

def _orphan_store():
    devices = [{"node": "n1", "gpu_uuid": f"GPU-{g}", "gpu_model": "H100"} for g in "abcdefgh"]
    devices += [{"node": "n1", "gpu_uuid": "GPU-m", "gpu_model": "A100"},
                {"node": "n1", "gpu_uuid": "GPU-m", "mig_gi_id": 1, "mig_placement_start": 0, **MIG},
                {"node": "n1", "gpu_uuid": "GPU-m", "mig_gi_id": 2, "mig_placement_start": 4, **MIG}]
    pods = [_pod("ns", "leaker", "n1", "GPU-a", T0, T0 + H), _pod("ns", "runner", "n1", "GPU-d", T0),
            _pod("ns", "done", "n1", "GPU-e", T0, T0 + 30 * MIN), _pod("ns", "mig-pod", "n1", "MIG-77", T0)]
    samples = [*_series("GPU-a", range(60), pod="leaker", fb=20 * GIB), *_series("GPU-a", range(60, 90), fb=2 * GIB),
               *_series("GPU-b", range(120), fb=50 * MIB),                           # below the GPU baseline
               *_series("GPU-c", range(14), fb=2 * GIB),                             # 840 s: too short
               *_series("GPU-c", range(100, 115), fb=2 * GIB),                       # 900 s: just long enough
               *_series("GPU-d", range(120), pod="runner", fb=30 * GIB),             # its pod still runs
               *_series("GPU-e", range(90), pod="done", fb=10 * GIB),                # ended pod still listed
               *_series("GPU-f", range(120)),                                        # memory unknown
               *_series("GPU-g", range(10), fb=2 * GIB), *_series("GPU-g", [10]),   # NULL splits the run
               *_series("GPU-g", range(11, 21), fb=2 * GIB),
               *_series("GPU-h", range(10), fb=2 * GIB), *_series("GPU-h", range(14, 31), fb=2 * GIB),  # gap
               *_series("GPU-m", range(20), fb=40 * MIB, mig=1),                     # above the MIG baseline
               *_series("GPU-m", range(20), pod="mig-pod", fb=20 * GIB, mig=2),
               *_series("GPU-m", range(20), fb=25 * GIB)]                            # parent: its instance is held
    return _store(devices=devices, pods=pods, samples=samples, prices=PRICES)


def test_orphaned_memory_runs_and_near_misses():
    frame = _run(_orphan_store(), "orphaned_memory", hours=4)
    got = [(r.gpu_uuid, _na(r.mig_gi_id), (r.since - T0) // MIN, r.seconds, r.max_fb_used_bytes, _na(r.last_pod),
            round(r.usd_unusable, 2)) for r in frame.itertuples()]
    assert got == [
        ("GPU-e", None, 30, 3600, 10 * GIB, "done", 4.00),
        ("GPU-a", None, 60, 1800, 2 * GIB, "leaker", 2.00),
        ("GPU-h", None, 14, 1020, 2 * GIB, None, 1.13),
        ("GPU-c", None, 100, 900, 2 * GIB, None, 1.00),
        ("GPU-m", 1, 0, 1200, 40 * MIB, None, 0.36),  # $2.50 x 3/7 x 1/3 h
    ]
    first = frame.iloc[0]
    assert first["until"] == T0 + 90 * MIN and first["last_namespace"] == "ns"
    assert first["recommendation"] == "drain the node and reset the GPU (memory held by no pod)"
    split = _run(_orphan_store(), "orphaned_memory", hours=4, orphan_min_seconds=600)
    g = split[split["gpu_uuid"] == "GPU-g"]
    assert [((s - T0) // MIN, sec) for s, sec in zip(g["since"], g["seconds"], strict=True)] == [(0, 600), (11, 600)]


TICK = st.lists(st.tuples(st.sampled_from([None, "live", "ended", "unlisted"]),
                          st.sampled_from([None, 0, 32 * MIB, 33 * MIB, 64 * MIB, 65 * MIB, 3 * GIB])),
                min_size=1, max_size=2, unique_by=lambda row: row[0])


def _brute_runs(ticks, *, ended_at, baseline, min_seconds, gap_steps):
    """(since, seconds, max fb) of every orphaned run, by a plain scan of (seconds, rows) ticks."""
    times = [t for t, _ in ticks]
    step = statistics.median([b - a for a, b in itertools.pairwise(times)]) if len(times) > 1 else 60.0
    runs, current, prev_t, prev_orphan = [], None, None, False
    for t, rows in ticks:
        held = any(pod in ("live", "unlisted") or (pod == "ended" and t < ended_at) for pod, _ in rows)
        known = [fb for _, fb in rows if fb is not None]
        orphan = not held and bool(known) and max(known) > baseline
        if orphan and prev_orphan and t - prev_t <= gap_steps * step:
            current[1], current[2] = t, max(current[2], max(known))
        elif orphan:
            runs.append(current := [t, t, max(known)])
        prev_t, prev_orphan = t, orphan
    return sorted((s, last - s + step, fb) for s, last, fb in runs if last - s + step >= min_seconds)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ticks=st.lists(st.tuples(st.sampled_from([1, 1, 1, 2, 5, 9]), TICK), min_size=1, max_size=30),
       mig=st.booleans(), ended_minute=st.integers(0, 60), min_minutes=st.integers(0, 12),
       gap_steps=st.sampled_from([1.0, 3.0]))
def test_orphaned_memory_matches_a_brute_force_scan(ticks, mig, ended_minute, min_minutes, gap_steps):
    timed, minute = [], 0
    for interval, rows in ticks:
        minute += interval
        timed.append((minute * 60, rows))
    samples = [{"ts": T0 + pd.Timedelta(seconds=t), "node": "n1", "gpu_uuid": "GPU-p", "mig_gi_id": 1 if mig else None,
                "namespace": pod and "ns", "pod": pod, "gpu_util": 0.5, "fb_used_bytes": fb}
               for t, rows in timed for pod, fb in rows]
    pods = [_pod("ns", "live", "n1", "GPU-p", T0), _pod("ns", "ended", "n1", "GPU-p", T0, T0 + ended_minute * MIN)]
    con = _store(samples=samples, pods=pods)
    frame = _run(con, "orphaned_memory", hours=24, orphan_min_seconds=min_minutes * 60, gap_steps=gap_steps)
    # the same answer where the hourly rollup is current (the analyze step's case): its hours only
    # choose which GPUs are scanned, and a pod ending mid-hour must not hide that hour's rows after it
    assert rollup.update(con, **{k: DEFAULTS[k] for k in analyses.ROLLUP_THRESHOLDS})
    pd.testing.assert_frame_equal(_run(con, "orphaned_memory", hours=24, orphan_min_seconds=min_minutes * 60,
                                       gap_steps=gap_steps), frame)
    got = sorted(((s - T0).total_seconds(), sec, fb)
                 for s, sec, fb in zip(frame["since"], frame["seconds"], frame["max_fb_used_bytes"], strict=True))
    baseline = DEFAULTS["orphan_mig_baseline_bytes" if mig else "orphan_gpu_baseline_bytes"]
    assert got == _brute_runs(timed, ended_at=ended_minute * 60, baseline=baseline, min_seconds=min_minutes * 60,
                              gap_steps=gap_steps)  # whole seconds and bytes: exact in floats
    assert ((frame["until"] - frame["since"]).dt.total_seconds() == frame["seconds"]).all()


def test_orphaned_memory_after_a_pod_ended_mid_hour_is_found_with_the_rollup_current():
    # the pod's own series goes on reporting 3 GiB for half an hour after its end, in the same clock hour
    samples = [{"ts": T0 + m * MIN, "node": "n1", "gpu_uuid": "GPU-p", "namespace": "ns", "pod": "ended",
                "gpu_util": 0.5, "fb_used_bytes": 3 * GIB} for m in range(50)]
    con = _store(samples=samples, pods=[_pod("ns", "ended", "n1", "GPU-p", T0, T0 + 20 * MIN)])
    assert rollup.update(con, **{k: DEFAULTS[k] for k in analyses.ROLLUP_THRESHOLDS})
    frame = _run(con, "orphaned_memory")
    assert [((r.since - T0) // MIN, r.seconds, r.last_pod) for r in frame.itertuples()] == [(20, 1800, "ended")]


def test_orphaned_memory_from_processes_of_ended_pods_and_host_processes():
    """The second path: NVML compute processes joined to pods through their cgroup (stg_processes)."""
    devices = [{"node": "n1", "gpu_uuid": g, "gpu_model": "H100", "fb_total_bytes": 80 * GIB} for g in ("GPU-x", "GPU-y", "GPU-a")]
    pods = [_pod("ns", "done", "n1", "GPU-x", T0, T0 + 30 * MIN, pod_uid="uid-done"),
            _pod("ns", "next", "n1", "GPU-x", T0 + 30 * MIN, pod_uid="uid-next"),
            _pod("ns", "leaker", "n1", "GPU-a", T0, T0 + H, pod_uid="uid-leaker"),
            _pod("ns", "live", "n1", "GPU-y", T0, pod_uid="uid-live")]
    samples = [*_series("GPU-x", range(30), pod="done", fb=10 * GIB), *_series("GPU-x", range(30, 120), pod="next", fb=20 * GIB),
               *_series("GPU-a", range(60), pod="leaker", fb=20 * GIB), *_series("GPU-a", range(60, 90), fb=2 * GIB),
               *_series("GPU-y", range(120), pod="live", fb=5 * GIB)]

    def proc(gpu, pid, minutes, *, uid=None, in_pod=1, fb=3 * GIB):
        return [{"ts": T0 + m * MIN, "node": "n1", "gpu_uuid": gpu, "pid": pid, "pod_uid": uid, "in_pod": in_pod,
                 "fb_used_bytes": fb} for m in minutes]
    processes = [*proc("GPU-x", 4242, range(0, 90), uid="uid-done"),          # its pod ended at 30: orphaned 30..90
                 *proc("GPU-x", 5000, range(30, 120), uid="uid-next"),        # the live pod's own process
                 *proc("GPU-y", 77, range(0, 20), in_pod=0, fb=GIB),           # a host process, 20 min
                 *proc("GPU-y", 88, range(0, 60), in_pod=None),               # cgroup unreadable: unknown
                 *proc("GPU-y", 89, range(0, 60), uid="uid-ghost"),           # a pod the pods file lacks: unknown
                 *proc("GPU-y", 90, range(0, 10), in_pod=0),                  # 10 min: too short
                 *proc("GPU-a", 99, range(0, 90), uid="uid-leaker")]          # evidence of the device's own run
    con = _store(devices=devices, pods=pods, samples=samples, processes=processes, prices=PRICES)
    frame = _run(con, "orphaned_memory", hours=4)
    got = [(r.gpu_uuid, r.cause, r.pids, _na(r.last_pod), (r.since - T0) // MIN, r.seconds, round(r.usd_unusable, 4))
           for r in frame.itertuples()]
    assert got == [
        ("GPU-a", "no_pod_allocated", "99", "leaker", 60, 1800, 2.0),                # $4 x 0.5 h
        ("GPU-x", "process_of_ended_pod", "4242", "done", 30, 3600, round(4.0 * 3 / 80, 4)),  # memory share
        ("GPU-y", "host_process", "77", None, 0, 1200, round(4.0 / 3 / 80, 4)),
    ]
    ended = frame[frame["cause"] == "process_of_ended_pod"].iloc[0]
    assert ended["pod_uid"] == "uid-done" and ended["recommendation"].startswith("kill PID 4242")
    # without process data the finding is the device path alone, pids unknown
    bare = _run(_store(devices=devices, pods=pods, samples=samples, prices=PRICES), "orphaned_memory", hours=4)
    assert bare["cause"].tolist() == ["no_pod_allocated"] and bare["pids"].isna().all()


# --- driver_drift --------------------------------------------------------------------------------

NODES = {"n1": ("H100", "535.129.03", "12.2"), "n2": ("H100", "535.129.03", "12.2"), "n3": ("H100", "550.54.15", "12.4"),
         "n4": ("H100", None, None), "n5": ("A100", "535.129.03", "12.2"), "n6": ("A100", "535.129.03", "12.2")}
STATUS = {"crash": {"waiting_reason": "CrashLoopBackOff"}, "config": {"waiting_reason": "CreateContainerConfigError"},
          "pull": {"waiting_reason": "ImagePullBackOff"}, "exit": {"last_exit_code": 1, "after": 5},
          "late": {"last_exit_code": 1, "after": 30}, "zero": {"last_exit_code": 0, "after": 2}, "ok": {}}


def _drift_store(outcomes: dict[str, list[str]], *, early: str | None = None, nodes=NODES, labels=None):
    """Two GPUs per node; per node the outcome of each pod it starts (STATUS); ``early``: a failing pod
    on that node that started before the window."""
    devices = [{"node": n, "gpu_uuid": f"GPU-{n}-{i}", "gpu_model": m, "driver_version": d, "cuda_driver_version": c}
               for n, (m, d, c) in nodes.items() for i in range(2)]
    pods, status = [], []
    for node, kinds in outcomes.items():
        for i, kind in enumerate(kinds):
            start = T0 + i * 10 * MIN
            pods.append(_pod("ns", f"{node}-{i}", node, f"GPU-{node}-0", start, start + 30 * MIN))
            row = dict(STATUS[kind])
            status.append({"ts": start + row.pop("after", 1) * MIN, "namespace": "ns", "pod": f"{node}-{i}",
                           "container": "main", "phase": "Running", **row})
    if early:
        pods.append(_pod("ns", "early", early, f"GPU-{early}-0", T0 - H, T0 + H))
        status.append({"ts": T0 + MIN, "namespace": "ns", "pod": "early", "waiting_reason": "CrashLoopBackOff"})
    node_rows = [{"node": n, "labels": json.dumps(v)} for n, v in (labels or {}).items()]
    return _store(devices=devices, pods=pods, pod_status=status, prices=PRICES, nodes=node_rows)


def test_driver_drift_blames_the_version_pods_fail_on():
    outcomes = {"n3": ["crash", "config", "exit", "late", "ok"], "n1": ["ok"] * 4 + ["pull", "crash"],
                "n2": ["ok"] * 3 + ["zero"], "n4": ["crash", "crash"], "n5": ["crash"] * 5}
    frame = _run(_drift_store(outcomes, early="n3"), "driver_drift")
    got = [(r.pool, r.driver_version, r.cuda_driver_version, r.nodes, r.gpus, r.pods_started, r.failed_starts,
            r.blamed, r.gpu_hours_lost, round(r.usd_lost, 2)) for r in frame.itertuples()]
    assert got == [  # the A100 pool runs one version: no rows
        ("H100", "550.54.15", "12.4", 1, 2, 5, 3, True, 1.5, 6.00),
        ("H100", "unknown", "unknown", 1, 2, 2, 2, False, 1.0, 4.00),  # unknown is never blamed
        ("H100", "535.129.03", "12.2", 2, 4, 10, 1, False, 0.5, 2.00),
    ]
    assert list(frame["failure_rate"]) == pytest.approx([0.6, 1.0, 0.1])
    assert list(frame["others_failure_rate"]) == pytest.approx([0.1, 4 / 15, 0.6])  # unknown is no baseline
    assert frame.iloc[0]["recommendation"] == "jobs fail on driver 550.54.15: pin the pool to driver 535.129.03 / upgrade"
    assert frame["recommendation"].iloc[1:].isna().all() and frame.iloc[1]["node_names"] == "n4"


def test_driver_drift_pools_by_a_node_label_and_judges_starts_within_the_flagged_time():
    """With --drift-pool-label, nodes of one model in different node pools are not compared: n3 (pool
    "canary") runs its own driver on purpose. A non-zero exit 30 min after the start is a failed start
    only once --drift-start-seconds reaches it."""
    outcomes = {"n3": ["crash", "config", "exit", "late", "ok"], "n1": ["ok"] * 4, "n2": ["ok"] * 4}
    labels = {"n1": {"karpenter_sh_nodepool": "main"}, "n2": {"karpenter_sh_nodepool": "main"},
              "n3": {"karpenter_sh_nodepool": "canary"}}
    con = _drift_store(outcomes, labels=labels, nodes={n: NODES[n] for n in ("n1", "n2", "n3")})
    by_model = _run(con, "driver_drift").set_index("driver_version")
    assert by_model.loc["550.54.15", "blamed"] and by_model.loc["550.54.15", "failed_starts"] == 3
    assert set(by_model["pool"]) == {"H100"}
    assert _run(con, "driver_drift", drift_pool_label="karpenter_sh_nodepool").empty  # each pool runs one version
    late = _run(con, "driver_drift", drift_start_seconds=3600.0).set_index("driver_version")
    assert late.loc["550.54.15", "failed_starts"] == 4


@pytest.mark.parametrize(("n3", "n1", "blamed"), [
    (["crash"] * 3 + ["ok"] * 7, ["crash"] * 3 + ["ok"] * 7, False),  # failures spread evenly
    (["crash"] * 3, ["ok"] * 5, True),                               # others never fail: any rate counts
    (["crash"] * 2, ["ok"] * 5, False),                              # below drift_min_failures
])
def test_driver_drift_near_misses(n3, n1, blamed):
    frame = _run(_drift_store({"n3": n3, "n1": n1}), "driver_drift").set_index("driver_version")
    assert frame.loc["550.54.15", "blamed"] == blamed and not frame.loc["535.129.03", "blamed"]


def test_driver_drift_needs_two_versions():
    same = {n: NODES[n] for n in ("n1", "n2", "n5", "n6")}
    con = _drift_store({"n1": ["crash"] * 5, "n2": ["ok"], "n5": ["crash"] * 5, "n6": ["ok"]}, nodes=same)
    assert _run(con, "driver_drift").empty


# --- contract --------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_headers_declare_params_that_are_analyze_flags_and_the_columns(name):
    header = analyses.header(name)
    assert set(header.params) == analyses.body_params(name)
    assert set(header.params) - {"start", "end"} <= set(DEFAULTS) | set(OPTIONS)  # thresholds and text options
    assert tuple(_run(_unhealthy_store(), name).columns) == header.columns
    body = analyses.sql(name)
    assert "final AS (" in body and body.rstrip().splitlines()[-1].startswith("SELECT * FROM final")
    assert " FROM samples" not in body and " FROM pods" not in body and " FROM health" not in body
