"""The mig_mismatch and gang_stall analyses on hand-built bundles loaded into a real DuckDB store.

mig_mismatch: failures at a MIG instance's (or whole GPU's) memory limit per pod, kept apart by
cause (Error or a non-zero code = gpu_memory; OOMKilled = host_memory at any GPU memory, no
profile), the recommended profile, GPU-hours and dollars burnt to the cent; near misses (below the
memory share, one failure, clean exits, a sidecar's restarts) give no row. gang_stall: idle holders
while siblings are Pending, with near misses (short waits, busy holders, pods of another job), and
stragglers (unknown SM activity: not judged). Two property tests (hypothesis): the run/restart
segmentation against a brute-force walk over the status rows, and the stall intervals against a
minute-by-minute sweep.
"""

from __future__ import annotations

import itertools

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params

T0 = pd.Timestamp("2026-11-09T00:00:00")
GIB = 2**30
H100 = "NVIDIA H100 80GB HBM3"
WINDOW = params(T0, T0 + pd.Timedelta(days=1))
PRICES = pd.DataFrame({"gpu_model": [H100], "usd_per_gpu_hour": [7.0]})  # a 1g slice: $1/h, a 3g: $3/h


def at(minute: float) -> pd.Timestamp:
    return T0 + pd.Timedelta(minutes=minute)


def gpu(node: str, uuid: str, *instances: tuple[int, int, str, int, int]) -> list[dict]:
    """A GPU's devices rows: the whole GPU and its MIG instances (gi, profile id, name, start, size)."""
    rows = [{"node": node, "gpu_uuid": uuid, "gpu_model": H100, "fb_total_bytes": 80 * GIB}]
    rows += [{"node": node, "gpu_uuid": uuid, "gpu_model": H100, "fb_total_bytes": size * 10 * GIB, "mig_gi_id": gi,
              "mig_profile": name, "mig_profile_id": pid, "mig_placement_start": start, "mig_placement_size": size}
             for gi, pid, name, start, size in instances]
    return rows


def samples(device: tuple[str, str, int | None], ns: str, pod: str, minutes: range, *, fb=lambda m: 2 * GIB,
            util=lambda m: 0.5, sm=lambda m: 0.5, container: str | None = "main") -> list[dict]:
    node, uuid, gi = device
    return [{"ts": at(m), "node": node, "gpu_uuid": uuid, "mig_gi_id": gi, "namespace": ns, "pod": pod,
             "container": container, "gpu_util": util(m), "sm_active": sm(m), "fb_used_bytes": float(fb(m))}
            for m in minutes]


def status(ns: str, pod: str, rows: list[tuple], *, container: str | None = "main", job: str | None = None,
           gpu_request: float | None = None) -> list[dict]:
    """pod_status rows from (minute, phase, restarts, last reason, last exit code)."""
    return [{"ts": at(m), "namespace": ns, "pod": pod, "container": container, "phase": phase, "restarts": restarts,
             "last_terminated_reason": reason, "last_exit_code": code, "job": job, "gpu_request": gpu_request}
            for m, phase, restarts, reason, code in rows]


def load(**frames: list[dict] | pd.DataFrame):
    con = store.connect(None)
    store.load(con, {k: v if isinstance(v, pd.DataFrame) else pd.DataFrame(v) for k, v in frames.items()},
               source="test")
    return con


def spikes(peaks: dict[int, float], base: float = 2 * GIB):
    """fb_used_bytes: ``base`` except at the given minutes."""
    return lambda m: peaks.get(m, base)


@pytest.mark.parametrize("name", ["mig_mismatch", "gang_stall"])
def test_header_contract_holds_on_a_store_without_pod_status(name):
    header = analyses.header(name)
    assert set(header.params) == analyses.body_params(name)
    assert " FROM samples" not in analyses.sql(name) and " FROM pods" not in analyses.sql(name)
    con = load(devices=gpu("n1", "GPU-A"), samples=samples(("n1", "GPU-A", None), "ml", "p", range(10)))
    frame = analyses.run(con, name, **WINDOW)
    assert frame.empty and tuple(frame.columns) == header.columns


# --- mig_mismatch -------------------------------------------------------------------------------------

GPU_A, GPU_B, GPU_C = ("n1", "GPU-A"), ("n1", "GPU-B"), ("n1", "GPU-C")


def mismatch_bundle() -> dict[str, list[dict]]:
    devices = (gpu(*GPU_A, (1, 9, "3g.40gb", 0, 4), (2, 9, "3g.40gb", 4, 4))
               + gpu(*GPU_B, *[(7 + i, 19, "1g.10gb", i, 1) for i in range(7)]) + gpu(*GPU_C))
    run, err, oom = "Running", ("Error", 1), ("OOMKilled", 137)
    rows, smp = [], []
    # CUDA OOM on a 1g: runs 10-60 and 60-120 reach 9.8 and 9.9 GiB of 10; the third (120-180) only 5 GiB
    rows += status("ml", "oom-loop", [(0, "Pending", 0, None, None), (10, run, 0, None, None), (60, run, 1, *err),
                                      (120, run, 2, *err), (180, run, 3, *err)])
    smp += samples((*GPU_B, 7), "ml", "oom-loop", range(10, 200),
                   fb=spikes({58: 9.8 * GIB, 119: 9.9 * GIB, 170: 5 * GIB, 60: 10 * GIB - 1}))
    # host OOM (the cgroup limit), on a 3g at 39 of 40 GiB and on a 1g at half of it: reported, no profile
    rows += status("ml", "host-oom", [(0, run, 0, None, None), (30, run, 1, *oom), (60, run, 2, *oom),
                                      (90, run, 2, None, None)])
    smp += samples((*GPU_A, 1), "ml", "host-oom", range(0, 120), fb=spikes({20: 39 * GIB, 50: 39 * GIB}))
    rows += status("ml", "host-oom-half", [(0, run, 0, None, None), (30, run, 1, *oom), (60, run, 2, *oom)])
    smp += samples((*GPU_B, 12), "ml", "host-oom-half", range(0, 90), fb=spikes({20: 5 * GIB, 50: 5 * GIB}))
    # a 3g too small for anything but the whole GPU: 39.5 GiB x 1.2 > 4 memory slices
    rows += status("ml", "big-3g", [(0, run, 0, None, None), (45, run, 1, *err), (90, run, 2, *err)])
    smp += samples((*GPU_A, 2), "ml", "big-3g", range(0, 120), fb=spikes({40: 39.5 * GIB, 80: 39.5 * GIB}))
    # a whole GPU: a bare non-zero exit code, then a bare Error reason
    rows += status("ml", "whole-loop", [(0, "Pending", 0, None, None), (5, run, 0, None, None), (35, run, 1, None, 2),
                                        (65, run, 2, "Error", None)])
    smp += samples((*GPU_C, None), "ml", "whole-loop", range(5, 100), fb=spikes({30: 79 * GIB, 60: 79 * GIB}))
    # near misses: failures at half the memory; one failure at the limit; clean exits at the limit
    rows += status("ml", "low-mem", [(0, run, 0, None, None), (30, run, 1, *err), (60, run, 2, *err)])
    # (its sample at the limit at minute 30, the restart row, belongs to the second run: one at the limit)
    smp += samples((*GPU_B, 8), "ml", "low-mem", range(0, 90), fb=spikes({20: 5 * GIB, 30: 9.9 * GIB, 50: 5 * GIB}))
    rows += status("ml", "one-failure", [(0, run, 0, None, None), (30, run, 1, *err), (60, run, 1, None, None)])
    smp += samples((*GPU_B, 9), "ml", "one-failure", range(0, 90), fb=spikes({20: 9.8 * GIB, 50: 9.8 * GIB}))
    rows += status("ml", "completed", [(0, run, 0, None, None), (30, run, 1, "Completed", 0),
                                       (60, run, 2, "Completed", 0)])
    smp += samples((*GPU_B, 10), "ml", "completed", range(0, 90), fb=spikes({20: 9.8 * GIB, 50: 9.8 * GIB}))
    # a sidecar crash-loops while the GPU container (the samples name it) sits at its limit: not a mismatch
    rows += status("ml", "sidecar", [(0, run, 0, None, None), (30, run, 1, *err), (60, run, 2, *err)],
                   container="proxy")
    smp += samples((*GPU_B, 11), "ml", "sidecar", range(0, 90), fb=lambda m: 9.8 * GIB)
    # a restartPolicy-Never Job: each retry is a new pod that fails once at the limit; one row for the job
    for n, (name, peak) in enumerate((("retry-a", 9.7), ("retry-b", 9.9), ("retry-c", 9.8))):
        t = 300 + 30 * n
        rows += status("ml", name, [(t, "Pending", 0, None, None), (t + 1, run, 0, None, None),
                                    (t + 21, "Failed", 0, *err)], job="retry-job")
        smp += samples((*GPU_B, 13), "ml", name, range(t + 1, t + 21), fb=spikes({t + 15: peak * GIB}))
    pods = [{"namespace": "ml", "pod": "oom-loop", "node": "n1", "team": "vision", "start_ts": at(0),
             "gpu_resource": "nvidia.com/mig-1g.10gb", "gpu_count": 1.0, "device_ids": "MIG-b7"}]
    return {"devices": devices, "samples": smp, "pod_status": rows, "pods": pods}


@pytest.fixture(scope="module")
def mismatch_store():
    con = load(**mismatch_bundle(), prices=PRICES)
    yield con
    con.close()


MISMATCH_COLUMNS = ("pod", "team", "gpu_uuid", "mig_gi_id", "mig_profile", "failed_runs", "peak_fb_used_bytes",
                    "fb_total_bytes", "cause", "recommended_profile", "gpu_hours_burnt", "usd_burnt",
                    "first_failure", "last_failure")
EXPECTED_MISMATCH = [
    # whole GPU: runs 5-35 and 35-65, one GPU at $7/h
    ("whole-loop", "ml", "GPU-C", None, None, 2, 79 * GIB, 80 * GIB, "gpu_memory", "larger GPU", 1.0, 7.00,
     at(35), at(65)),
    # 0-45 and 45-90 on 3 of 7 slices at $3/h
    ("big-3g", "ml", "GPU-A", 2, "3g.40gb", 2, 39.5 * GIB, 40 * GIB, "gpu_memory", "whole GPU", 1.5 * 3 / 7, 4.50,
     at(45), at(90)),
    ("host-oom", "ml", "GPU-A", 1, "3g.40gb", 2, 39 * GIB, 40 * GIB, "host_memory", None, 3 / 7, 3.00,
     at(30), at(60)),
    # 9.9 GiB x 1.2 needs two memory slices: the 1g.2x (one compute slice) before the 2g; the sample at
    # minute 60 (the restart row) belongs to the next run; runs 10-60 and 60-120 = 110 min at $1/h
    ("oom-loop", "vision", "GPU-B", 7, "1g.10gb", 2, 10 * GIB - 1, 10 * GIB, "gpu_memory", "1g.20gb", 110 / 60 / 7,
     1.83, at(60), at(120)),
    ("host-oom-half", "ml", "GPU-B", 12, "1g.10gb", 2, 5 * GIB, 10 * GIB, "host_memory", None, 1 / 7, 1.00,
     at(30), at(60)),
    # three pods of one Job, 20 min each at $1/h; the row names the pod that came closest to the limit
    ("retry-b", "ml", "GPU-B", 13, "1g.10gb", 3, 9.9 * GIB, 10 * GIB, "gpu_memory", "1g.20gb", 1 / 7, 1.00,
     at(321), at(381)),
]


def test_mig_mismatch_finds_failures_at_the_memory_limit_and_keeps_causes_apart(mismatch_store):
    frame = analyses.run(mismatch_store, "mig_mismatch", **WINDOW)
    assert tuple(frame.columns) == analyses.header("mig_mismatch").columns
    got = frame[list(MISMATCH_COLUMNS)].astype(object).where(frame[list(MISMATCH_COLUMNS)].notna(), None)
    assert len(got) == len(EXPECTED_MISMATCH)
    for row, want in zip(got.itertuples(index=False), EXPECTED_MISMATCH, strict=True):
        row = dict(zip(MISMATCH_COLUMNS, row, strict=True))
        expected = dict(zip(MISMATCH_COLUMNS, want, strict=True))
        assert row["usd_burnt"] == pytest.approx(expected.pop("usd_burnt"), abs=0.005), row["pod"]
        assert row["gpu_hours_burnt"] == pytest.approx(expected.pop("gpu_hours_burnt")), row["pod"]
        assert {k: row[k] for k in expected} == expected
    assert set(frame["node"]) == {"n1"}
    jobs = frame.set_index("pod")[["job", "pods"]]
    assert jobs.loc["retry-b"].tolist() == ["retry-job", 3] and jobs.loc["oom-loop", "pods"] == 1


def test_mig_mismatch_never_prices_an_unpriced_gpu_at_zero(mismatch_store):
    priced = analyses.run(mismatch_store, "mig_mismatch", **WINDOW)
    unpriced = analyses.run(load(**mismatch_bundle()), "mig_mismatch", **WINDOW)
    assert unpriced["usd_burnt"].isna().all()
    hours = priced.set_index("pod")["gpu_hours_burnt"]
    assert unpriced.set_index("pod")["gpu_hours_burnt"].to_dict() == pytest.approx(hours.to_dict())


def test_mig_mismatch_thresholds_are_bound(mismatch_store):
    lenient = analyses.run(mismatch_store, "mig_mismatch", **{**WINDOW, "mismatch_min_failures": 1})
    lenient = lenient.set_index("pod")
    assert lenient.loc["one-failure", "failed_runs"] == 1 and lenient.loc["one-failure", "last_failure"] == at(30)
    assert lenient.loc["low-mem", "failed_runs"] == 1 and lenient.loc["low-mem", "last_failure"] == at(60)
    low = analyses.run(mismatch_store, "mig_mismatch", **{**WINDOW, "mismatch_mem_share": 0.4}).set_index("pod")
    assert low.loc["low-mem", "failed_runs"] == 2 and low.loc["low-mem", "recommended_profile"] == "1g.20gb"
    assert "sidecar" not in low.index and "completed" not in low.index
    # the third oom-loop run (5 GiB of 10) now counts too
    assert low.loc["oom-loop", "failed_runs"] == 3


# --- mig_mismatch segmentation, against a brute-force walk -------------------------------------------

def brute_runs(rows: list[tuple], fb: dict[int, float], *, share: float, total: float, start: int) -> list[tuple]:
    """Failed runs at the limit as (cause, ended minute, counted seconds), walking the rows in order
    (docs/architecture.md#finding-semantics, mig_mismatch.sql's header)."""
    out, boundary, prev_restarts, prev_phase = [], None, None, None
    for i, (m, phase, restarts, reason, code) in enumerate(rows):
        phase_l = phase.lower() if phase else None
        ended = i > 0 and ((restarts is not None and prev_restarts is not None and restarts > prev_restarts)
                           or (phase_l == "failed" and prev_phase != "failed"))
        reset = restarts is not None and prev_restarts is not None and restarts < prev_restarts
        started = phase_l != "pending" and (i == 0 or prev_phase in ("pending", "failed", "succeeded") or reset)
        failed = (code is not None and code != 0) or (reason or "").lower() in ("error", "oomkilled")
        if ended and boundary is not None and m >= start and failed:
            run_from = max(boundary, start)
            peak = max((v for t, v in fb.items() if run_from <= t < m), default=None)
            cause = "host_memory" if (reason or "").lower() == "oomkilled" else "gpu_memory"
            if peak is not None and (cause == "host_memory" or peak >= share * total):
                out.append((cause, m, (m - run_from) * 60))
        if ended or started:
            boundary = m
        prev_restarts = restarts if restarts is not None else prev_restarts
        prev_phase = phase_l if phase_l is not None else prev_phase
    return out


status_row = st.tuples(st.sampled_from(["Pending", "Running", "Running", "Running", "Failed", None]),
                       st.sampled_from([0, 1, 1, 1, 2, -1]),  # restart count step (-1: a new pod of that name)
                       st.sampled_from([None, "Error", "Error", "OOMKilled", "Completed"]),
                       st.sampled_from([None, 0, 1, 1, 137]))
_PODS = itertools.count()


@pytest.fixture(scope="module")
def property_store():
    con = load(devices=gpu("n9", "GPU-P", (1, 19, "1g.10gb", 0, 1)), prices=PRICES)
    yield con
    con.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(st.integers(1, 20), status_row), min_size=1, max_size=12),
       high=st.lists(st.booleans(), min_size=32, max_size=32), start=st.integers(0, 40))
def test_mig_mismatch_segmentation_matches_a_brute_force_walk(property_store, steps, high, start):
    pod = f"p{next(_PODS)}"
    rows, minute, restarts = [], 0, 0
    for gap, (phase, step, reason, code) in steps:
        minute += gap
        restarts = max(restarts + step, 0)
        rows.append((minute, phase, restarts, reason, code))
    fb = {m: (9.9 if high[m // 5] else 1.0) * GIB for m in range(0, 160)}  # at the limit by 5-minute blocks
    con = property_store
    store.load(con, {"pod_status": pd.DataFrame(status("p", pod, rows)),
                     "samples": pd.DataFrame(samples(("n9", "GPU-P", 1), "p", pod, range(0, 160), fb=fb.get))},
               source="test")
    window = params(at(start), T0 + pd.Timedelta(days=1))
    frame = analyses.run(con, "mig_mismatch", **{**window, "mismatch_min_failures": 1})
    frame = frame[frame["pod"] == pod]
    runs = brute_runs(rows, fb, share=0.95, total=10 * GIB, start=start)
    want = {}
    for cause, ended, seconds in runs:
        n, burnt, first, last = want.get(cause, (0, 0, ended, ended))
        want[cause] = (n + 1, burnt + seconds, min(first, ended), max(last, ended))
    got = {r.cause: (r.failed_runs, r.usd_burnt, r.first_failure, r.last_failure) for r in frame.itertuples()}
    # a 1g slice costs $1/h; each run's dollars are rounded to the cent once (docs/architecture.md#billing)
    assert got == {c: (n, round(burnt / 3600, 2), at(first), at(last)) for c, (n, burnt, first, last) in want.items()}


# --- gang_stall ---------------------------------------------------------------------------------------

def whole_gpus(node: str, count: int) -> list[dict]:
    return [row for i in range(count) for row in gpu(node, f"GPU-{i}")]


def holder(ns: str, pod: str, gpus: list[int], *, start: float = 0) -> dict:
    return {"namespace": ns, "pod": pod, "node": "n2", "start_ts": at(start), "gpu_resource": "nvidia.com/gpu",
            "gpu_count": float(len(gpus)), "device_ids": ",".join(f"GPU-{g}" for g in gpus)}


def on(gpus: list[int], ns: str, pod: str, minutes: range, **readings) -> list[dict]:
    return [row for g in gpus for row in samples(("n2", f"GPU-{g}", None), ns, pod, minutes, **readings)]


IDLE = {"util": lambda m: 0.0, "sm": lambda m: 0.0}
BUSY = {"util": lambda m: 0.9, "sm": lambda m: 0.8}


def dip(minutes: range, low: float):
    """SM activity 0.8, ``low`` during ``minutes``."""
    return lambda m: low if m in minutes else 0.8


def stall_bundle(*, blind_sm: float | None = None) -> dict[str, list[dict]]:
    run, pend = (0, "Running", 0, None, None), (0, "Pending", 0, None, None)
    pods, smp, rows = [], [], []
    # llama: two pods hold 4 GPUs idle for an hour; their two siblings wait Pending for 50 minutes
    for i in (0, 1):
        pods.append(holder("train", f"llama-{i}", [2 * i, 2 * i + 1]))
        smp += on([2 * i, 2 * i + 1], "train", f"llama-{i}", range(0, 60), **IDLE)
        smp += on([2 * i, 2 * i + 1], "train", f"llama-{i}", range(60, 120), **BUSY)
        rows += status("train", f"llama-{i}", [run], job="llama", gpu_request=2)
    for i in (2, 3):
        pods.append(holder("train", f"llama-{i}", [2 * i, 2 * i + 1], start=50))
        smp += on([2 * i, 2 * i + 1], "train", f"llama-{i}", range(50, 120), **BUSY)
        rows += status("train", f"llama-{i}", [pend, (50, "Running", 0, None, None)], job="llama", gpu_request=2)
    # another namespace's job of the same name waits too: not llama's sibling
    rows += status("other", "llama-x", [pend], job="llama", gpu_request=8)
    # short: a sibling Pending for 10 minutes only; busy: the holder computes while its sibling waits
    pods.append(holder("train", "short-0", [8]))
    smp += on([8], "train", "short-0", range(0, 120), **IDLE)
    rows += status("train", "short-0", [run], job="short", gpu_request=1)
    rows += status("train", "short-1", [pend, (10, "Running", 0, None, None)], job="short", gpu_request=1)
    pods.append(holder("train", "busy-0", [9]))
    smp += on([9], "train", "busy-0", range(0, 120), **BUSY)
    rows += status("train", "busy-0", [run], job="busy", gpu_request=1)
    rows += status("train", "busy-1", [pend], job="busy", gpu_request=1)
    # solo-a (job a) holds an idle GPU while solo-b (job b) waits: different jobs
    pods.append(holder("train", "solo-a", [10]))
    smp += on([10], "train", "solo-a", range(0, 120), **IDLE)
    rows += status("train", "solo-a", [run], job="a", gpu_request=1)
    rows += status("train", "solo-b", [pend], job="b", gpu_request=1)
    # ddp: ddp-3 lags its job at 40% SM for 40 minutes; ddp-2 at 30% for 10 minutes only
    for i in range(4):
        pods.append(holder("train", f"ddp-{i}", [11 + i]))
        rows += status("train", f"ddp-{i}", [run], job="ddp", gpu_request=1)
    dips = {2: dip(range(90, 100), 0.3), 3: dip(range(30, 70), 0.4)}
    for i in range(4):
        smp += on([11 + i], "train", f"ddp-{i}", range(0, 120), util=lambda m: 0.9, sm=dips.get(i, BUSY["sm"]))
    # blind: blind-1 would lag, but blind-2's SM activity is unknown, so the job is not judged
    for i, sm in enumerate((0.9, 0.2, blind_sm)):
        pods.append(holder("train", f"blind-{i}", [15 + i]))
        smp += on([15 + i], "train", f"blind-{i}", range(0, 120), util=lambda m: 0.9, sm=lambda m, s=sm: s)
        rows += status("train", f"blind-{i}", [run], job="blind", gpu_request=1)
    return {"devices": whole_gpus("n2", 18), "pods": pods, "samples": smp, "pod_status": rows}


@pytest.fixture(scope="module")
def stall_store():
    con = load(**stall_bundle(), prices=PRICES)
    yield con
    con.close()


def _records(frame: pd.DataFrame, columns: tuple[str, ...]) -> list[dict]:
    part = frame[list(columns)].astype(object)
    return [{k: (None if pd.isna(v) else v) for k, v in row.items()} for row in part.to_dict("records")]


STALL_COLUMNS = ("kind", "namespace", "job", "since", "until", "seconds", "pods_holding", "gpus_held", "pods_pending",
                 "gpus_pending", "pod", "gpu_uuid", "recommendation")


def test_gang_stall_finds_idle_holders_and_stragglers_only(stall_store):
    frame = analyses.run(stall_store, "gang_stall", **WINDOW)
    assert tuple(frame.columns) == analyses.header("gang_stall").columns
    assert _records(frame, STALL_COLUMNS) == [
        {"kind": "partial_allocation", "namespace": "train", "job": "llama", "since": at(0), "until": at(50),
         "seconds": 3000.0, "pods_holding": 2, "gpus_held": 4.0, "pods_pending": 2, "gpus_pending": 4.0,
         "pod": None, "gpu_uuid": None,
         "recommendation": "gang scheduling: the job holds 4 GPUs idle waiting for 4 more; use a gang scheduler "
                           "(Volcano/Kueue/KAI) or release"},
        {"kind": "straggler", "namespace": "train", "job": "ddp", "since": at(30), "until": at(70),
         "seconds": 2400.0, "pods_holding": 4, "gpus_held": 4.0, "pods_pending": 0, "gpus_pending": 0.0,
         "pod": "ddp-3", "gpu_uuid": "GPU-14",
         "recommendation": "straggler: ddp-3 on GPU-14 ran at 40% SM activity against the job's median 80% for "
                           "40 min; check that GPU and node (clocks, throttling, PCIe/NVLink, neighbours) or cordon it"},
    ]
    stall, straggler = frame.iloc[0], frame.iloc[1]
    assert stall["idle_gpu_hours"] == pytest.approx(4 * 50 / 60)
    assert round(stall["usd_held_idle"], 2) == 23.33  # 4 GPUs x $7/h x 50 min
    assert straggler["sm_active"] == pytest.approx(0.4) and straggler["job_median_sm_active"] == pytest.approx(0.8)
    assert pd.isna(straggler["usd_held_idle"]) and pd.isna(straggler["idle_gpu_hours"])
    assert straggler["node"] == "n2" and pd.isna(straggler["mig_gi_id"])


def test_gang_stall_thresholds_are_bound(stall_store):
    frame = analyses.run(stall_store, "gang_stall", **{**WINDOW, "gang_min_seconds": 600, "straggler_min_seconds": 600})
    short = frame[frame["job"] == "short"].iloc[0]
    assert (short["since"], short["until"], short["pods_holding"], short["gpus_pending"]) == (at(0), at(10), 1, 1.0)
    assert round(short["usd_held_idle"], 2) == 1.17  # 1 GPU x $7/h x 10 min
    assert set(frame.loc[frame["kind"] == "straggler", "pod"]) == {"ddp-2", "ddp-3"}
    strict = analyses.run(stall_store, "gang_stall", **{**WINDOW, "straggler_gap": 0.5})
    assert set(strict["kind"]) == {"partial_allocation"}  # ddp-3 lags by 0.4 only


def test_gang_stall_judges_the_blind_job_once_its_sm_activity_is_known():
    con = load(**stall_bundle(blind_sm=0.9), prices=PRICES)
    frame = analyses.run(con, "gang_stall", **WINDOW)
    blind = frame[frame["job"] == "blind"]
    assert _records(blind, ("pod", "since", "until", "seconds")) == [
        {"pod": "blind-1", "since": at(0), "until": at(120), "seconds": 7200.0}]
    assert blind["job_median_sm_active"].iloc[0] == pytest.approx(0.9)


def test_a_straggler_sampled_faster_than_its_job_is_judged_on_its_bucket_means():
    # two devices sampled each minute, one every 30 s: the job's buckets are a minute long, and the fast
    # device's two readings in a bucket (0.2 and 0.4 from minute 20 to 60) are one device at 0.3, not two
    pods, smp, rows = [], [], []
    for i in range(3):
        pods.append(holder("train", f"mix-{i}", [i]))
        rows += status("train", f"mix-{i}", [(0, "Running", 0, None, None)], job="mix", gpu_request=1)
    for i in (0, 1):
        smp += on([i], "train", f"mix-{i}", range(0, 120), util=lambda m: 0.9, sm=lambda m: 0.8)
    halves = [m / 2 for m in range(0, 240)]
    smp += on([2], "train", "mix-2", halves, util=lambda m: 0.9,
              sm=lambda m: (0.2 if m % 1 == 0 else 0.4) if 20 <= m < 60 else 0.8)
    frame = analyses.run(load(devices=whole_gpus("n2", 3), pods=pods, samples=smp, pod_status=rows, prices=PRICES),
                         "gang_stall", **WINDOW)
    assert _records(frame, ("kind", "pod", "since", "until", "seconds", "pods_holding")) == [
        {"kind": "straggler", "pod": "mix-2", "since": at(20), "until": at(60), "seconds": 2400.0, "pods_holding": 3}]
    assert frame["sm_active"].iloc[0] == pytest.approx(0.3)
    assert frame["job_median_sm_active"].iloc[0] == pytest.approx(0.8)


# --- gang_stall intervals, against a minute-by-minute brute force -------------------------------------

def brute_stalls(idle: list[list[bool]], pending: list[tuple[int, int | None]], *, end: int,
                 min_minutes: int) -> list[tuple[int, int]]:
    """Stalls as (since, until) minutes: a sibling Pending and every holder idle, minute by minute."""
    stalled = [any(a <= m < (end if b is None else b) for a, b in pending) and all(h[m] for h in idle)
               for m in range(end)]
    out, since = [], None
    for m, flag in enumerate([*stalled, False]):
        if flag and since is None:
            since = m
        elif not flag and since is not None:
            out += [(since, m)] if m - since >= min_minutes else []
            since = None
    return out


_JOBS = itertools.count()


@pytest.fixture(scope="module")
def gang_property_store():
    # a status row at minute 60 fixes the data's end (open states end there) for every example
    con = load(devices=whole_gpus("n2", 2), prices=PRICES,
               pod_status=status("zz", "clock", [(60, "Running", 0, None, None)]))
    yield con
    con.close()


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(blocks=st.lists(st.lists(st.sampled_from([True, True, True, False]), min_size=12, max_size=12),
                      min_size=1, max_size=2),
       waits=st.lists(st.tuples(st.integers(0, 50), st.one_of(st.none(), st.integers(1, 40))), min_size=1, max_size=3))
def test_gang_stall_intervals_match_a_brute_force_sweep(gang_property_store, blocks, waits):
    ns, con = f"s{next(_JOBS)}", gang_property_store
    idle = [[b[m // 5] for m in range(60)] for b in blocks]  # idle or busy by 5-minute blocks, minutes 0-59
    pending = [(a, None if n is None else min(a + n, 60)) for a, n in waits]
    pods = [holder(ns, f"h{i}", [i]) for i in range(len(idle))]
    smp = [row for i, flags in enumerate(idle)
           for row in on([i], ns, f"h{i}", range(60), util=lambda m, f=flags: 0.0 if f[m] else 0.9,
                         sm=lambda m, f=flags: 0.0 if f[m] else 0.9)]
    rows = [r for i in range(len(idle)) for r in status(ns, f"h{i}", [(0, "Running", 0, None, None)], job="j")]
    for i, (a, b) in enumerate(pending):
        states = [(a, "Pending", 0, None, None)] + ([] if b is None else [(b, "Running", 0, None, None)])
        rows += status(ns, f"w{i}", states, job="j", gpu_request=1)
    store.load(con, {"pods": pd.DataFrame(pods), "samples": pd.DataFrame(smp), "pod_status": pd.DataFrame(rows)},
               source="test")
    frame = analyses.run(con, "gang_stall", **{**WINDOW, "gang_min_seconds": 600})
    frame = frame[(frame["namespace"] == ns) & (frame["kind"] == "partial_allocation")].sort_values("since")
    want = brute_stalls(idle, pending, end=60, min_minutes=10)
    assert [(r.since, r.until) for r in frame.itertuples()] == [(at(a), at(b)) for a, b in want]
    assert list(frame["idle_gpu_hours"]) == pytest.approx([(b - a) * len(idle) / 60 for a, b in want])


@pytest.mark.parametrize(("seen", "expected"), [((), None), (((3, 14, "2g.10gb", 2, 2, 9856),), "2g.10gb")])
def test_mig_mismatch_recommends_no_profile_whose_memory_nobody_reported(seen, expected):
    """An A100 40GB: no real GPU of its size is in mig.CAPTURED, so a 1g.5gb failing at its limit gets
    no recommendation (unknown, never a slice fraction) until the store has seen a larger profile's
    instances, whose own FB total then decides (9856 MiB holds 4.7 GiB x 1.2)."""
    model, mib = "NVIDIA A100-SXM4-40GB", 2**20
    devices = [{"node": "n2", "gpu_uuid": "GPU-D", "gpu_model": model, "fb_total_bytes": 40960 * mib}]
    devices += [{"node": "n2", "gpu_uuid": "GPU-D", "gpu_model": model, "fb_total_bytes": memory * mib, "mig_gi_id": gi,
                 "mig_profile": name, "mig_profile_id": pid, "mig_placement_start": start, "mig_placement_size": size}
                for gi, pid, name, start, size, memory in ((7, 19, "1g.5gb", 0, 1, 4864), *seen)]
    err = ("Error", 1)
    rows = status("ml", "small", [(0, "Running", 0, None, None), (30, "Running", 1, *err), (60, "Running", 2, *err)])
    smp = samples(("n2", "GPU-D", 7), "ml", "small", range(0, 90), fb=spikes({20: 4.7 * GIB, 50: 4.7 * GIB}))
    con = load(devices=devices, samples=smp, pod_status=rows)
    try:
        frame = analyses.run(con, "mig_mismatch", **WINDOW)
    finally:
        con.close()
    assert frame["pod"].tolist() == ["small"] and frame["cause"].tolist() == ["gpu_memory"]
    assert frame["recommended_profile"].where(frame["recommended_profile"].notna(), None).tolist() == [expected]
