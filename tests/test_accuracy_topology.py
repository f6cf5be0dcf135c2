"""Topology findings against the simulator's ground truth (truth.csv ``topology``): on
build_fleet(gpus=64, topology=True) at two seeds, precision and recall >= 0.95 for misplaced jobs
(truth misplaced or spread: a pod row flagged misplaced, or a member of a job row flagged misplaced or
spread) and for blocked pending pods (truth blocked; the ``full`` decoys, too few free GPUs, must be
'insufficient capacity'). Every multi-GPU pod the truth judges gets a row."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import fleet as workloads
from gpuwatch.findings import TOPOLOGY, findings
from gpuwatch.fleet.command import write_bundle
from tests.support.bundles import loaded

FLOOR = 0.95
BAD = ("misplaced", "spread")


@pytest.fixture(scope="module", params=[0, 1], ids=["seed 0", "seed 1"])
def found(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"topology{request.param}")
    write_bundle(workloads.build_fleet(gpus=64, seed=request.param, days=7, topology=True), path, step=60)
    con, params = loaded(path)
    frames = findings(con, params, only=TOPOLOGY)
    members = _job_members(con)
    con.close()
    yield frames, members, pd.read_csv(path / "truth.csv")


def _job_members(con) -> pd.DataFrame:
    """Each pod's job key as the analysis defines it (stg_pod_status job, else owner kind/name)."""
    return con.execute("""
        SELECT p.namespace, p.pod, p.start_ts,
               coalesce(j.job, nullif(p.owner_kind, '') || '/' || nullif(p.owner_name, '')) AS job
        FROM stg_pods p
        LEFT JOIN (SELECT namespace, pod, arg_max(job, ts) AS job FROM stg_pod_status
                   WHERE job IS NOT NULL GROUP BY namespace, pod) j USING (namespace, pod)""").df()


def _covered(rows: pd.DataFrame, members: pd.DataFrame) -> set[tuple]:
    """The pods of these rows: a pod row's pod, a job row's member pods (started in its span)."""
    out = {(r.namespace, r.pod) for r in rows[rows["scope"] == "pod"].itertuples()}
    for r in rows[rows["scope"] == "job"].itertuples():
        end = r.end_ts if pd.notna(r.end_ts) else pd.Timestamp.max
        mine = members[(members["namespace"] == r.namespace) & (members["job"] == r.job)
                       & (members["start_ts"] >= r.start_ts) & (members["start_ts"] < end)]
        out |= set(zip(mine["namespace"], mine["pod"], strict=True))
    return out


def _flagged(placement: pd.DataFrame, members: pd.DataFrame) -> set[tuple]:
    return _covered(placement[placement["verdict"].isin(BAD)], members)


def _score(reported: set, truth: set) -> tuple[float, float]:
    hits = reported & truth
    return len(hits) / max(len(reported), 1), len(hits) / max(len(truth), 1)


def _truth(truth: pd.DataFrame, labels: tuple[str, ...]) -> set[tuple]:
    rows = truth[truth["topology"].isin(labels)]
    return set(zip(rows["namespace"], rows["pod"], strict=True))


def test_misplaced_and_spread_jobs_match_truth(found):
    frames, members, truth = found
    planted = _truth(truth, BAD)
    assert planted, "nothing planted"
    reported = _flagged(frames["topology_placement"], members)
    precision, recall = _score(reported, planted)
    assert precision >= FLOOR and recall >= FLOOR, (precision, recall, reported - planted, planted - reported)
    well = _truth(truth, ("well_placed",))
    assert not reported & well, f"well-placed pods flagged: {reported & well}"


def test_every_judged_pod_has_a_verdict(found):
    frames, members, truth = found
    placement = frames["topology_placement"]
    judged = _truth(truth, ("well_placed", "misplaced", "spread"))
    assert judged - _covered(placement, members) == set()
    assert set(placement["verdict"]) <= {"misplaced", "spread", "well_placed", "topology unknown"}
    assert (placement.loc[placement["verdict"] == "well_placed", "penalty_usd"] == 0).all()
    assert (placement.loc[placement["verdict"] == "misplaced", "penalty_usd"] > 0).all()


def test_blocked_pending_pods_match_truth(found):
    frames, _, truth = found
    blocked = frames["blocked_demand"]
    reported = set(zip(*(blocked.loc[blocked["verdict"] == "blocked", c] for c in ("namespace", "pod")), strict=True))
    planted = _truth(truth, ("blocked",))
    assert planted, "nothing planted"
    precision, recall = _score(reported, planted)
    assert precision >= FLOOR and recall >= FLOOR, (precision, recall, reported - planted, planted - reported)
    full = _truth(truth, ("full",))
    verdicts = blocked.set_index(["namespace", "pod"])["verdict"]
    assert full and all(verdicts.get(k) == "insufficient capacity" for k in full), full
    assert (blocked.loc[blocked["verdict"] == "blocked", "opportunity_usd"] > 0).all()
    assert blocked.loc[blocked["verdict"] == "blocked", "defrag_node"].notna().all()
