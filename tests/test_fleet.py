"""The synthetic fleet generator: deterministic, internally consistent, and the same signal
whether read live (exporter) or over a grid (bundle).

Checks: same seed -> same fleet and values; segments never overlap on a device (except
time-sliced replicas); MIG placements are valid (no overlap, valid starts); every pod has
ground truth and a Pending -> Running (-> Succeeded) life in pod_status; every device its node's
driver; idle/busy signal shapes match the behaviour the truth claims.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuwatch.fleet import DRIVER, MIG_PROFILES, build_fleet, iter_samples, readings_at
from gpuwatch.fleet import readings as fleet_readings

VALID_STARTS = {19: {0, 1, 2, 3, 4, 5, 6}, 15: {0, 2, 4, 6}, 14: {0, 2, 4}, 9: {0, 4}, 5: {0}, 0: {0}}


@pytest.fixture(scope="module")
def fleet():
    return build_fleet(gpus=64, seed=0, days=2)


def test_same_seed_same_fleet(fleet):
    again = build_fleet(gpus=64, seed=0, days=2)
    assert again.devices == fleet.devices and again.pods == fleet.pods and again.segments == fleet.segments
    other = build_fleet(gpus=64, seed=1, days=2)
    assert other.pods != fleet.pods


def test_live_reading_equals_grid_sample(fleet):
    t = fleet.start + 3600 * 7 + 60 * 13
    live = {(d.key, p.pod if p else None): v for d, p, v in readings_at(fleet, t)}
    grid = {}
    for seg, _, cols in iter_samples(fleet, np.array([t])):
        key = (fleet.devices[seg.device].key, fleet.pods[seg.pod].pod if seg.pod is not None else None)
        grid[key] = {k: float(v[0]) for k, v in cols.items()}
    assert live.keys() == grid.keys()
    for key, values in live.items():
        np.testing.assert_equal(values, grid[key])


def test_segments_tile_each_device_without_overlap(fleet):
    by_device: dict[int, list] = {}
    for seg in fleet.segments:
        by_device.setdefault(seg.device, []).append(seg)
    for device, segs in by_device.items():
        exclusive = sorted((s.start, s.end) for s in segs if s.share == 1.0)
        for (_, end), (start, _) in itertools.pairwise(exclusive):
            assert start >= end, f"device {device} has overlapping exclusive occupants"
        covered = sum(e - s for s, e in exclusive)
        if all(s.share == 1.0 for s in segs):
            assert covered == pytest.approx(fleet.end - fleet.start), f"device {device} has an untracked gap"


def test_mig_placements_are_valid(fleet):
    by_gpu: dict[str, list] = {}
    for d in fleet.devices:
        if d.is_mig:
            assert d.mig_placement_start in VALID_STARTS[d.mig_profile_id]
            assert d.mig_placement_size == MIG_PROFILES[d.mig_profile_id][2]
            by_gpu.setdefault(d.gpu_uuid, []).append(d)
    assert by_gpu, "the fleet should contain MIG GPUs"
    for instances in by_gpu.values():
        slices = [s for d in instances for s in range(d.mig_placement_start, d.mig_placement_start + d.mig_placement_size)]
        assert len(slices) == len(set(slices)) and max(slices) < 8
        assert len({d.mig_gi_id for d in instances}) == len(instances)


def test_every_pod_has_truth_and_all_kinds_exist(fleet):
    assert len(fleet.truth) == len(fleet.pods)
    assert {t["pod"] for t in fleet.truth} == {p.pod for p in fleet.pods}
    assert {t["behavior"] for t in fleet.truth} == {"productive", "hoarder", "false_util"}
    assert {t["placement"] for t in fleet.truth} == {"whole", "mig", "shared"}


def test_every_pod_has_its_states_and_every_device_a_driver(fleet):
    states: dict[str, list[dict]] = {}
    for row in fleet.pod_status:
        states.setdefault(row["pod"], []).append(row)
    assert states.keys() == {p.pod for p in fleet.pods}
    for pod in fleet.pods:
        rows = sorted(states[pod.pod], key=lambda r: r["ts"])
        phases = [r["phase"] for r in rows]
        expected = ["Pending"] * (pod.start_ts > fleet.start) + ["Running"] + ["Succeeded"] * (pod.end_ts is not None)
        assert phases == expected, pod.pod
        assert next(r["ts"] for r in rows if r["phase"] == "Running") == pod.start_ts
        assert pod.end_ts is None or rows[-1]["ts"] == pod.end_ts
        assert {r["restarts"] for r in rows} == {0} and {r["gpu_request"] for r in rows} == {pod.gpu_count}
        assert {r["job"] for r in rows} == {pod.owner_name if pod.owner_kind in ("Job", "RayCluster") else None}
    assert {(d.driver_version, d.cuda_driver_version) for d in fleet.devices} == {DRIVER}


def test_signals_match_claimed_behaviour(fleet):
    ts = np.arange(fleet.start, fleet.end, 60.0)
    stats: dict[str, list[float]] = {"hoarder": [], "false_util": [], "productive": []}
    for seg, _, cols in iter_samples(fleet, ts):
        if seg.pod is None:
            assert np.nanmax(np.nan_to_num(cols["gpu_util"])) == 0.0
            continue
        reported = np.where(np.isnan(cols["gpu_util"]), cols["gr_engine_active"], cols["gpu_util"])
        if seg.behavior == "hoarder":
            stats["hoarder"].append(float(np.mean(reported < 0.05)))
        elif seg.behavior == "false_util" and seg.profiling:
            stats["false_util"].append(float(np.mean((reported >= 0.5) & (cols["sm_active"] < 0.25))))
        elif seg.behavior == "productive":
            stats["productive"].append(float(np.mean(reported < 0.05)))
    assert min(stats["hoarder"]) >= 0.9, "hoarders must be idle at least 90% of the time"
    assert min(stats["false_util"]) >= 0.9, "false-util pods must look busy with idle SMs"
    assert max(stats["productive"]) == 0.0, "productive pods are never idle"


def test_mig_rows_have_no_gpu_util_and_shared_rows_no_profiling(fleet):
    ts = np.arange(fleet.start, fleet.start + 3600, 60.0)
    for seg, _, cols in iter_samples(fleet, ts):
        device = fleet.devices[seg.device]
        if device.is_mig:
            assert np.isnan(cols["gpu_util"]).all() and np.isnan(cols["power_watts"]).all()
        if seg.share < 1:
            assert np.isnan(cols["sm_active"]).all() and not np.isnan(cols["gpu_util"]).any()


def test_noise_is_uniform_and_stateless():
    ts = np.arange(0, 100_000, 1.0)
    u = fleet_readings._uniform(12345, ts)
    assert u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01
    assert fleet_readings._uniform(12345, ts[500:501])[0] == u[500]
