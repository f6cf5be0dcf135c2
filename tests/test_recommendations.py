"""Recommendations are a pure function of analysis frames: table-driven cases per kind, stable ids,
savings arithmetic (the run-rate of observed waste, never more), and the filters (ended pods are not
reclaimed, hoarders are not right-sized, investigate items are not counted).
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch.recommendations import COLUMNS, recommend, stable_id, totals

GIB = 1 << 30


def _idle(**overrides):
    row = {"namespace": "ns", "pod": "nb-0", "team": "t", "node": "n1", "hoarder": True, "idle_share": 0.95,
           "observed_gpu_hours": 10.0, "observed_seconds": 36000.0, "idle_since": pd.Timestamp("2026-11-15T12:00:00"), "reclaimable_now": True,
           "max_fb_used_bytes_idle": 20 * GIB, "usd_per_hour": 4.0, "end_ts": pd.NaT, "idle_cost_usd": 38.0,
           "gpu_count": 1}
    return pd.DataFrame([{**row, **overrides}])


def test_reclaim_idle_carries_evidence_and_savings():
    recs = recommend(idle=_idle(), window_hours=168.0, observed_hours=40.0)
    assert list(recs.columns) == list(COLUMNS)
    row = recs.iloc[0]
    assert row["kind"] == "reclaim_idle" and row["counted"]
    # $38 idle over the 10 h the pod was observed, at that rate for a month (idle_bridge.pod_run_rate): the
    # pod's own rate, not diluted by the 40 observed hours of a window longer than the pod's life
    assert row["monthly_savings_usd"] == row["monthly_waste_usd"] == pytest.approx(38.0 / 10 * 730, abs=0.01)
    assert row["basis"] == ("idle cost $38.00 over the 10.0 h the pod was observed, at that rate for 730 h/month "
                            "while it keeps its GPUs")
    assert row["action"] == "Give back 1 GPU(s) held idle by ns/nb-0 (t)"
    assert "idle since 2026-11-15T12:00:00Z" in row["evidence"] and "20.0 GiB" in row["evidence"]
    assert "$4.00/hour" in row["evidence"]


@pytest.mark.parametrize(("overrides", "expected"), [
    ({"hoarder": False}, 0),
    ({"end_ts": pd.Timestamp("2026-11-12"), "reclaimable_now": False}, 0),  # already gone
    ({"end_ts": pd.Timestamp("2026-11-12"), "reclaimable_now": True}, 1),
    ({"held_at_end": False, "reclaimable_now": False}, 0),  # its GPUs were no longer sampled at the end
    ({"held_at_end": True, "reclaimable_now": False}, 1),  # still holding, busy at the end: investigate_hoarder
])
def test_reclaim_idle_filters(overrides, expected):
    assert len(recommend(idle=_idle(**overrides))) == expected


def test_stable_ids_do_not_depend_on_numbers():
    a = recommend(idle=_idle(usd_per_hour=1.0)).iloc[0]["id"]
    b = recommend(idle=_idle(usd_per_hour=9.0, idle_share=0.99)).iloc[0]["id"]
    assert a == b == stable_id("reclaim_idle", "ns", "nb-0")
    assert stable_id("reclaim_idle", "ns", "other") != a


def test_rightsize_skips_hoarders_and_zero_savings():
    rs = pd.DataFrame([
        {"namespace": "ns", "pod": "nb-0", "team": "t", "node": "n1", "peak_fb_used_bytes": 5 * GIB,
         "sm_active_quantile": 0.1, "profile": "1g.10gb", "current_usd_per_hour": 4.0, "target_usd_per_hour": 0.6,
         "monthly_savings_usd": 2482.0},
        {"namespace": "ns", "pod": "inf-0", "team": "t", "node": "n1", "peak_fb_used_bytes": 30 * GIB,
         "sm_active_quantile": 0.4, "profile": "3g.40gb", "current_usd_per_hour": 4.0, "target_usd_per_hour": 1.7,
         "monthly_savings_usd": 1679.0},
        {"namespace": "ns", "pod": "none-0", "team": "t", "node": "n1", "peak_fb_used_bytes": 30 * GIB,
         "sm_active_quantile": 0.4, "profile": "3g.40gb", "current_usd_per_hour": 1.0, "target_usd_per_hour": 1.7,
         "monthly_savings_usd": -511.0},
    ])
    rs["observed_seconds"] = 84 * 3600.0
    recs = recommend(idle=_idle(), rightsizing=rs, window_hours=168.0)
    rightsize = recs[recs["kind"] == "rightsize_mig"]
    assert list(rightsize["pod"]) == ["inf-0"]
    assert rightsize.iloc[0]["target"] == "3g.40gb" and "30.0 GiB" in rightsize.iloc[0]["evidence"]
    # observed half the window: half of (4.0 - 1.7) x 730, not the full price difference for a month
    assert rightsize.iloc[0]["monthly_savings_usd"] == pytest.approx((4.0 - 1.7) * 84 / 168 * 730, abs=0.01)


def test_repack_mig_uses_the_repack_column_and_prices():
    mig = pd.DataFrame([
        {"node": "n2", "gpu_uuid": "GPU-x", "gpu_model": "M", "free_slices": 3, "stranded_slices": 2,
         "instances": "3g.40gb@0,1g.10gb@4", "repack_layout": "3g.40gb@4,1g.10gb@0", "repack_stranded_slices": 0},
        {"node": "n2", "gpu_uuid": "GPU-y", "gpu_model": "M", "free_slices": 0, "stranded_slices": 0,
         "instances": "7g.80gb@0", "repack_layout": "", "repack_stranded_slices": 0},
    ])
    prices = pd.DataFrame({"gpu_model": ["M"], "usd_per_gpu_hour": [8.0]})
    recs = recommend(mig=mig, prices=prices)
    assert len(recs) == 1 and recs.iloc[0]["kind"] == "repack_mig"
    assert recs.iloc[0]["monthly_savings_usd"] == pytest.approx(2 / 8 * 8.0 * 730)
    assert recs.iloc[0]["id"] == stable_id("repack_mig", None, "GPU-x")
    assert recs.iloc[0]["action"].startswith("Re-create the MIG instances of GPU GPU-x on n2 as 3g.40gb@4,1g.10gb@0")
    # chargeback priced the stranded capacity lower ($84 over the 168 h window = $0.50/h): that caps it
    capped = recommend(mig=mig, prices=prices, stranded_usd=84.0, window_hours=168.0)
    assert capped.iloc[0]["monthly_savings_usd"] == pytest.approx(0.5 * 730)


def test_a_partial_repack_saves_only_the_share_it_frees():
    mig = pd.DataFrame([{"node": "n2", "gpu_uuid": "GPU-x", "gpu_model": "M", "free_slices": 4, "stranded_slices": 4,
                         "instances": "i", "repack_layout": "r", "repack_stranded_slices": 1, "repack_moves": 2}])
    row = recommend(mig=mig, prices=pd.DataFrame({"gpu_model": ["M"], "usd_per_gpu_hour": [8.0]})).iloc[0]
    assert row["monthly_waste_usd"] == pytest.approx(4 / 8 * 8.0 * 730)
    assert row["monthly_savings_usd"] == pytest.approx(3 / 4 * row["monthly_waste_usd"], abs=0.01)
    assert "(2 instance(s) move), freeing 3 slice(s)" in row["action"]


def test_investigate_false_util_shows_reported_vs_effective():
    fu = pd.DataFrame([{"namespace": "ns", "pod": "job-0", "team": "t", "node": "n1", "offender": True,
                        "mean_reported": 0.97, "mean_effective": 0.06, "false_share": 0.95,
                        "false_util_cost_usd": 168.0, "usd_per_hour": 4.0},
                       {"namespace": "ns", "pod": "ok-0", "team": "t", "node": "n1", "offender": False,
                        "mean_reported": 0.9, "mean_effective": 0.7, "false_share": 0.0,
                        "false_util_cost_usd": 0.0, "usd_per_hour": 4.0}])
    recs = recommend(false_util=fu, window_hours=168.0)
    assert list(recs["pod"]) == ["job-0"]
    assert "reported utilization 97% vs effective (SM active) 6%" in recs.iloc[0]["evidence"]
    # at stake, not a saving: a person must look first
    assert recs.iloc[0]["monthly_waste_usd"] == pytest.approx(168.0 / 168 * 730)
    assert recs.iloc[0]["monthly_savings_usd"] == 0 and not recs.iloc[0]["counted"]
    assert totals(recs) == {"savings": 0.0, "at_stake": 730.0, "waste": 730.0}


def test_no_inputs_no_recommendations():
    recs = recommend()
    assert recs.empty and list(recs.columns) == list(COLUMNS)
