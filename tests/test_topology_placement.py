"""topology_placement on hand-built layouts (tests/support/topology_bundles.py): a misplaced pod on an
L40S-like PCIe node beside a decoy that had nothing better free when it started, an HGX NUMA split, a
spread job beside a job that needed its nodes, and a node whose topology is unknown; plus the
golden CSV and the fix_placement recommendation built on it."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from gpuwatch import analyses, recommendations, topology
from gpuwatch.recommendations_topology import rows as topology_rows
from tests.support.topology_bundles import placement_bundle

COMM = 0.1


@pytest.fixture(scope="module")
def placed():
    con, params = placement_bundle().load()
    frame = analyses.run(con, "topology_placement", **params)
    con.close()
    return frame


def _pod(frame: pd.DataFrame, pod: str) -> pd.Series:
    rows = frame[(frame["scope"] == "pod") & (frame["pod"] == pod)]
    assert len(rows) == 1, pod
    return rows.iloc[0]


def _job(frame: pd.DataFrame, job: str) -> pd.Series:
    rows = frame[(frame["scope"] == "job") & (frame["job"] == job)]
    assert len(rows) == 1, job
    return rows.iloc[0]


def test_pcie_pod_across_sockets_is_misplaced_when_a_switch_pair_was_free(placed):
    bad = _pod(placed, "pcie-bad")
    assert (bad["verdict"], bad["worst_link"], bad["better_link"], bad["numa_nodes"]) == ("misplaced", "SYS", "PIX", 2)
    better = [int(i) for i in bad["better_gpus"].split(",")]
    assert len(better) == 2 and better[0] // 2 == better[1] // 2  # one PCIe switch
    expected = topology.penalty_share(topology.bandwidth("SYS"), topology.bandwidth("PIX"), COMM)
    assert bad["penalty_share"] == pytest.approx(expected)
    assert bad["cost_usd"] == pytest.approx(2 * 1.5 * 3.0)  # 2 GPUs x $1.5 x 3 h
    assert bad["penalty_usd"] == pytest.approx(expected * bad["cost_usd"])
    assert json.loads(bad["link_matrix"]) == {"0-4": "SYS"}


def test_the_same_gpus_are_well_placed_when_nothing_better_was_free_at_its_start(placed):
    ok = _pod(placed, "pcie-ok")  # the filler freed the other GPUs 50 minutes after it started
    assert (ok["verdict"], ok["worst_link"], ok["penalty_usd"]) == ("well_placed", "SYS", 0.0)
    assert pd.isna(ok["better_link"])


def test_hgx_numa_split_costs_the_numa_penalty(placed):
    split = _pod(placed, "numa-split")
    assert (split["verdict"], split["worst_link"], split["better_link"]) == ("misplaced", "NV18", "NV18")
    assert (split["numa_nodes"], split["better_gpus"]) == (2, "0,1,2,3")
    assert split["penalty_share"] == pytest.approx(0.05)
    assert split["penalty_usd"] == pytest.approx(0.05 * 4 * 4.0 * 2)


def test_spread_job_is_charged_the_network_against_one_node(placed):
    ddp = _job(placed, "Job/ddp")
    assert (ddp["verdict"], ddp["nodes"], ddp["nodes_spanned"], ddp["min_nodes"]) == ("spread", "hgx-2,hgx-3", 2, 1)
    assert (ddp["worst_link"], ddp["better_link"], ddp["gpus"]) == ("SYS", "NV18", 8)
    expected = topology.penalty_share(topology.bandwidth("SYS"), topology.bandwidth("NV", 18), COMM)
    assert ddp["penalty_share"] == pytest.approx(expected)
    assert ddp["penalty_usd"] == pytest.approx(expected * 8 * 4.0 * 2)
    assert pd.isna(ddp["pod"])
    # each of its pods, judged alone, got the best block of its node
    assert {_pod(placed, p)["verdict"] for p in ("ddp-0", "ddp-1")} == {"well_placed"}


def test_a_job_that_needed_its_nodes_is_not_spread(placed):
    ok = _job(placed, "Job/ok")
    assert (ok["verdict"], ok["nodes_spanned"], ok["min_nodes"], ok["penalty_usd"]) == ("well_placed", 2, 2, 0.0)


def test_unknown_topology_is_reported_and_never_charged(placed):
    dark = _pod(placed, "dark")
    assert dark["verdict"] == "topology unknown"
    assert pd.isna(dark["worst_link"]) and pd.isna(dark["penalty_share"]) and pd.isna(dark["penalty_usd"])
    assert json.loads(dark["link_matrix"]) == {"0-1": None}


def test_window_clips_cost_and_verdicts_need_no_samples(placed):
    assert placed["nvlink_bytes_per_second"].isna().all()  # no samples: unknown, never 0
    assert (placed.loc[placed["verdict"] == "well_placed", "penalty_usd"] == 0).all()


def test_fix_placement_recommendation_is_an_estimate_not_counted(placed):
    rate = recommendations.RunRate(hours=6.0, hours_per_month=730)
    recs = topology_rows(rate=rate, topology_placement=placed)
    by_model = {r["id"]: r for r in recs if r["kind"] == "fix_placement"}
    assert len(by_model) == 2  # the H100 pool (split + spread job) and the L40S pool
    for r in by_model.values():
        assert not r["counted"] and r["monthly_savings_usd"] == 0 and "estimate" in r["basis"]
        assert "single-numa-node" in r["action"]
    h100 = next(r for r in by_model.values() if "H100" in r["action"])
    waste = _pod(placed, "numa-split")["penalty_usd"] + _job(placed, "Job/ddp")["penalty_usd"]
    assert h100["monthly_waste_usd"] == pytest.approx(waste / 6.0 * 730)
    assert "Job/ddp" in h100["evidence"] and "pack multi-pod jobs" in h100["action"]
    again = topology_rows(rate=rate, topology_placement=placed)
    assert [r["id"] for r in again] == [r["id"] for r in recs]  # stable across runs


def test_golden(placed, golden):
    golden("analyses/topology_placement.csv", placed.to_csv(index=False, float_format="%.6g",
                                                             date_format="%Y-%m-%dT%H:%M:%SZ", lineterminator="\n"))
