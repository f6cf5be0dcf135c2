"""The mig_fragmentation analysis end to end: a simulated fleet's bundle loaded into a real DuckDB
store, the SQL + finisher run through gpuwatch.analyses, and the result checked against what
workloads.MIG_LAYOUTS implies (stranded slices by brute force, instances in use from the
fleet's own timeline). Also: the pods-only fallback, bad placements, unknown placements and
unknown profile names.
"""

from __future__ import annotations

from collections import Counter

import pandas as pd
import pytest

from gpuwatch import analyses, mig, store
from gpuwatch import fleet as workloads
from gpuwatch.analyses.mig_fragmentation import COLUMNS, fleet_total
from gpuwatch.fleet import command as simulate
from tests.test_mig import brute_stranded

STEP = 600.0
NAME_TO_ID = {name: pid for pid, (name, _, _) in workloads.MIG_PROFILES.items()}


def fleet_store(fleet: workloads.Fleet, *, samples: bool = True):
    """A real in-memory store holding ``fleet``'s bundle (samples every STEP seconds)."""
    con = store.connect(None)
    frames = {"devices": simulate.devices_frame(fleet), "pods": simulate.pods_frame(fleet, fmt="parquet"),
              "prices": simulate.prices_frame()}
    if samples:
        frames["samples"] = pd.concat([t.to_pandas() for t in simulate.sample_batches(fleet, step=STEP)])
        for name in ("node", "gpu_uuid", "namespace", "pod", "container"):
            frames["samples"][name] = frames["samples"][name].astype(object)
    store.load(con, frames, source="test")
    return con


def window(fleet: workloads.Fleet) -> dict:
    return {"start": pd.Timestamp(fleet.start, unit="s").to_pydatetime(),
            "end": pd.Timestamp(fleet.end, unit="s").to_pydatetime()}


@pytest.fixture(scope="module")
def fleet() -> workloads.Fleet:
    # 13 nodes: gpu-node-002 and gpu-node-012 are MIG nodes, together holding all six layouts
    return workloads.build_fleet(gpus=104, seed=3, days=2)


@pytest.fixture(scope="module")
def result(fleet) -> pd.DataFrame:
    return analyses.run(fleet_store(fleet), "mig_fragmentation", **window(fleet))


def expected_in_use(fleet: workloads.Fleet, t: float) -> dict[str, set[tuple[int, int]]]:
    """gpu uuid -> {(profile id, start)} held by a pod at instant t, from the fleet's timeline."""
    out: dict[str, set] = {}
    for seg in fleet.segments:
        device = fleet.devices[seg.device]
        if device.is_mig and seg.pod is not None and seg.start <= t < seg.end:
            out.setdefault(device.gpu_uuid, set()).add((device.mig_profile_id, device.mig_placement_start))
    return out


def test_columns_lead_with_the_chargeback_contract(result):
    assert tuple(result.columns) == COLUMNS == analyses.header("mig_fragmentation").columns
    assert list(result.columns[:5]) == ["node", "gpu_uuid", "gpu_model", "free_slices", "stranded_slices"]


def test_stranded_slices_match_the_layouts(fleet, result):
    demand = {NAME_TO_ID[p.gpu_resource.removeprefix("nvidia.com/mig-")] for p in fleet.pods
              if p.gpu_resource.startswith("nvidia.com/mig-")}
    gpus: dict[str, list] = {}
    for d in fleet.devices:
        if d.is_mig:
            gpus.setdefault(d.gpu_uuid, []).append(mig.Placement(d.mig_profile_id, d.mig_placement_start))
    assert len(result) == len(gpus) == 8
    index = {tuple(sorted(layout)): i for i, layout in enumerate(workloads.MIG_LAYOUTS)}
    seen = set()
    for row in result.itertuples():
        layout = gpus[row.gpu_uuid]
        seen.add(index[tuple(sorted((p.profile_id, p.start) for p in layout))])
        assert row.free_slices == 8 - sum(p.profile.size for p in layout)
        assert row.stranded_slices == len(brute_stranded(layout, demand))
        assert row.problem == ""
        if 15 not in demand:  # layouts 1, 3 and 5 (see their comments in MIG_LAYOUTS) strand slice 7
            assert row.stranded_slices == (1 if index_of(layout, index) in {1, 3, 5} else 0)
    assert seen == set(range(len(workloads.MIG_LAYOUTS)))


def index_of(layout: list, index: dict) -> int:
    return index[tuple(sorted((p.profile_id, p.start) for p in layout))]


def test_in_use_comes_from_the_last_sample(fleet, result):
    grid_end = fleet.start + STEP * ((fleet.end - fleet.start) // STEP)
    last = grid_end - STEP if grid_end >= fleet.end else grid_end
    truth = expected_in_use(fleet, last)
    for row in result.itertuples():
        got = {(mig.parse_profile(part.rsplit("@", 1)[0], gpu_memory_bytes=80 * 2**30), int(part.rsplit("@", 1)[1]))
               for part in row.in_use.split(",") if part}
        assert got == truth.get(row.gpu_uuid, set()), row.gpu_uuid
        assert row.allocation_source == "samples"


def test_repack_never_worse_and_fleet_total(result):
    assert (result["repack_stranded_slices"] <= result["free_slices"] + 8).all()
    assert result["repack_moves"].ge(0).all() and result["repack_fits"].notna().all()
    total = fleet_total(result)
    assert total["gpus"] == 8 and total["stranded_slices"] == int(result["stranded_slices"].sum())
    assert total["stranded_fraction"] == pytest.approx(total["stranded_slices"] / 64)


def test_without_samples_running_pods_decide_what_is_in_use(fleet):
    got = analyses.run(fleet_store(fleet, samples=False), "mig_fragmentation", **window(fleet))
    assert set(got["allocation_source"]) == {"pods"}
    running = Counter((p.node, p.gpu_resource.removeprefix("nvidia.com/mig-")) for p in fleet.pods
                      if p.gpu_resource.startswith("nvidia.com/mig-") and p.end_ts is None)
    held = Counter()
    for row in got.itertuples():
        for part in filter(None, row.in_use.split(",")):
            held[(row.node, part.rsplit("@", 1)[0])] += 1
    assert held == running


def small_bundle(devices: list[dict], pods: list[dict]) -> dict:
    devices_frame = pd.DataFrame(devices, columns=list(simulate.BUNDLE_COLUMNS["devices"]))
    pods_frame = pd.DataFrame(pods, columns=list(simulate.BUNDLE_COLUMNS["pods"]))
    return {"devices": devices_frame, "pods": pods_frame}


def instance(gpu: str, gi: int, name: str, pid: int | None, start: int | None, size: int | None) -> dict:
    return {"node": "n1", "gpu_uuid": gpu, "gpu_index": 0, "gpu_model": "NVIDIA H100 80GB HBM3",
            "fb_total_bytes": 10 * 2**30 * (size or 1), "mig_gi_id": gi, "mig_profile": name,
            "mig_profile_id": pid, "mig_placement_start": start, "mig_placement_size": size}


def pod(name: str, resource: str) -> dict:
    return {"namespace": "ns", "pod": name, "node": "n1", "start_ts": workloads.DEFAULT_START,
            "end_ts": None, "gpu_resource": resource, "gpu_count": 1, "device_ids": ""}


def run_small(devices: list[dict], pods: list[dict]) -> pd.DataFrame:
    con = store.connect(None)
    store.load(con, small_bundle(devices, pods), source="test")
    start = workloads.DEFAULT_START
    return analyses.run(con, "mig_fragmentation", start=pd.Timestamp(start, unit="s").to_pydatetime(),
                        end=pd.Timestamp(start + 3600, unit="s").to_pydatetime())


def test_bad_and_unknown_input_is_named_not_guessed():
    devices = [instance("GPU-bad", 1, "3g.40gb", 9, 0, 4), instance("GPU-bad", 2, "2g.20gb", 14, 2, 2),  # overlap
               instance("GPU-a30", 1, "1g.6gb", 14, 0, 1),  # A30 ids mean other sizes
               instance("GPU-nopl", 7, "1g.10gb", 19, None, None), instance("GPU-nopl", 8, "1g.10gb", 19, None, None),
               instance("GPU-nopl", 9, "1g.10gb", 19, None, None)]
    pods = [pod("a", "nvidia.com/mig-3g.40gb"), pod("b", "nvidia.com/mig-5g.50gb")]
    got = run_small(devices, pods).set_index("gpu_uuid")
    assert "overlaps" in got.loc["GPU-bad", "problem"] and pd.isna(got.loc["GPU-bad", "stranded_slices"])
    assert "does not match profile 14" in got.loc["GPU-a30", "problem"]
    # three 1g with unknown placement: best case packs them at 0,1,2 so a 3g fits at 4
    assert got.loc["GPU-nopl", "problem"].startswith("placement unknown")
    assert (got.loc["GPU-nopl", "free_slices"], got.loc["GPU-nopl", "stranded_slices"]) == (5, 1)
    assert got.loc["GPU-nopl", "demand_mix"] == "3g.40gb:0.50 (ignored: 5g.50gb×1)"
    assert fleet_total(got.reset_index())["gpus_with_problems"] == 2


def test_no_mig_pods_means_any_profile():
    got = run_small([instance("GPU-x", 7 + s, "1g.10gb", 19, s, 1) for s in range(7)], [])
    row = got.iloc[0]
    assert row["demand_mix"].startswith("(no MIG pods")
    assert (row["free_slices"], row["stranded_slices"]) == (1, 1)  # 1g is at its max of 7; 15/9/0 blocked
