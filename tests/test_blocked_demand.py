"""blocked_demand on a hand-built pool (tests/support/topology_bundles.py blocked_bundle): two 4-GPU L4
nodes, each with 2 GPUs held (one 2-GPU pod on blk-1, two 1-GPU pods on blk-2), and pending pods that
need 4 GPUs (blocked: 4 free, 2 per node), 8 (insufficient capacity), another pool (unknown), and a
2 x 2 gang that fits (it waited for something else)."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import analyses, recommendations
from gpuwatch.analyses.blocked_demand import COLUMNS, cheapest_move
from gpuwatch.recommendations_topology import rows as topology_rows
from tests.support.topology_bundles import L4, PRICES, blocked_bundle, minutes


@pytest.fixture(scope="module")
def blocked():
    con, params = blocked_bundle().load()
    frame = analyses.run(con, "blocked_demand", **params).set_index("pod")
    con.close()
    return frame


def test_fragmented_pool_blocks_a_pod_it_could_hold(blocked):
    r = blocked.loc["wants-4"]
    assert (r["verdict"], r["gpu_model"], r["gpus_requested"]) == ("blocked", L4, 4)
    assert r["blocked_hours"] == pytest.approx(115 / 60) and r["wait_hours"] == pytest.approx(115 / 60)
    assert (r["max_free_gpus"], r["max_free_block"]) == (4, 2)
    assert r["opportunity_usd"] == pytest.approx(4 * PRICES[L4] * 115 / 60)
    assert "blk-1 2 free" in r["why"] and "blk-2 2 free" in r["why"]


def test_cheapest_defrag_moves_one_pod(blocked):
    r = blocked.loc["wants-4"]
    assert (r["defrag_node"], r["defrag_pods"], r["defrag_gpus_moved"]) == ("blk-1", "ml/f1", 2)


def test_too_few_free_gpus_is_insufficient_capacity(blocked):
    r = blocked.loc["wants-8"]
    assert (r["verdict"], r["blocked_hours"], r["max_free_gpus"]) == ("insufficient capacity", 0, 4)
    assert pd.isna(r["defrag_node"])


def test_a_pool_without_nodes_is_unknown(blocked):
    r = blocked.loc["wants-h200"]
    assert r["verdict"] == "unknown" and pd.isna(r["max_free_gpus"]) and pd.isna(r["opportunity_usd"])


def test_a_gang_that_fits_waited_for_something_else(blocked):
    for pod in ("gang-0", "gang-1"):
        r = blocked.loc[pod]
        assert (r["verdict"], r["blocked_hours"]) == ("unknown", 0)
        assert "another cause" in r["why"]


def test_a_short_block_is_not_blocked():
    con, params = blocked_bundle().load(blocked_min_seconds=3 * 3600)
    frame = analyses.run(con, "blocked_demand", **params).set_index("pod")
    assert frame.loc["wants-4", "verdict"] == "unknown" and "115 min only" in frame.loc["wants-4", "why"]
    assert frame.loc["wants-4", "blocked_hours"] == pytest.approx(115 / 60)  # measured, under the bar
    assert pd.isna(frame.loc["wants-4", "opportunity_usd"])


def test_cheapest_move_prefers_fewest_pods_then_gpus():
    holders = {"a": 0b0001, "b": 0b0010, "c": 0b1100}
    assert cheapest_move(holders, 2, {"other": 2}) == (["c"], 2)
    assert cheapest_move(holders, 2, {"other": 1, "third": 1}) == (["a", "b"], 2)
    assert cheapest_move(holders, 3, {"other": 1}) is None  # nowhere to put them
    shared = {"x": 0b1, "y": 0b1}  # two pods on one (time-sliced) GPU: moving one frees nothing
    assert cheapest_move(shared, 1, {"other": 4}) == (["x", "y"], 2)


def test_defragment_recommendation_is_an_opportunity_not_counted(blocked):
    rate = recommendations.RunRate(hours=6.0, hours_per_month=730)
    recs = topology_rows(rate=rate, blocked_demand=blocked.reset_index())
    assert [r["kind"] for r in recs] == ["defragment"]
    r = recs[0]
    assert not r["counted"] and r["monthly_savings_usd"] == 0 and "opportunity" in r["basis"]
    assert r["monthly_waste_usd"] == pytest.approx(blocked.loc["wants-4", "opportunity_usd"] / 6 * 730)
    assert "ml/f1" in r["action"] and r["node"] == "blk-1"


def test_golden(blocked, golden):
    golden("analyses/blocked_demand.csv", blocked.reset_index()[list(COLUMNS)].to_csv(
        index=False, float_format="%.6g", date_format="%Y-%m-%dT%H:%M:%SZ", lineterminator="\n"))


def test_a_pod_deleted_while_pending_waited_only_until_it_went():
    """An unknown-phase row (ingest writes one when a pod stops being reported) ends the wait: the
    opportunity cost is for the hour it waited, not to the end of the data."""
    b = blocked_bundle()
    b.status.append({"ts": minutes(65), "namespace": "ml", "pod": "wants-4", "container": "main"})
    con, params = b.load()
    frame = analyses.run(con, "blocked_demand", **params).set_index("pod")
    assert frame.loc["wants-4", "pending_until"] == minutes(65)
    assert frame.loc["wants-4", "wait_hours"] == pytest.approx(1.0)
