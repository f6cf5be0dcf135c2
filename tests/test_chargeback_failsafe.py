"""Chargeback never makes a wrong dollar (regressions for the fail-safe issue's defect 4): a GPU
model without a price is reported as unpriced, never $0 inside a team; a case-different model name
still finds its price; an allocation above the capacity it can hold is capped and the excess
reported, so unallocated never goes negative; an open allocation whose node stopped reporting ends
there; non-finite or absurd prices and GPU counts are refused at load."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpuwatch import analyses, store, units
from gpuwatch.analyses import chargeback
from gpuwatch.analyses.params import params

T0 = pd.Timestamp("2026-11-09T00:00:00")
WINDOW = params(T0.to_pydatetime(), (T0 + pd.Timedelta(hours=10)).to_pydatetime())


def _load(*, prices, pods, devices=None, samples=None):
    con = store.connect(None)
    devices = devices or [{"node": "n1", "gpu_uuid": "GPU-a", "gpu_model": "NVIDIA H100 80GB HBM3"},
                          {"node": "n2", "gpu_uuid": "GPU-b", "gpu_model": "Mystery GPU"}]
    frames = {"devices": pd.DataFrame(devices), "prices": pd.DataFrame(prices), "pods": pd.DataFrame(pods)}
    if samples is not None:
        frames["samples"] = pd.DataFrame(samples)
    store.load(con, frames, source="test")
    return con


def _pod(name, node, device, *, count=1.0, team="t", end=None):
    return {"namespace": "ns", "pod": name, "node": node, "team": team, "gpu_resource": "nvidia.com/gpu",
            "gpu_count": count, "device_ids": device, "start_ts": T0, "end_ts": end}


def test_an_unpriced_gpu_is_reported_not_charged_as_zero():
    con = _load(prices=[{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0}],
                pods=[_pod("priced", "n1", "GPU-a"), _pod("mystery", "n2", "GPU-b", team="u")])
    charge = analyses.run(con, "chargeback", **WINDOW)
    assert charge["fleet_cost_usd"].iloc[0] == pytest.approx(40.0)  # only the priced GPU
    teams = charge[charge["kind"] == "team"]
    assert set(teams["team"]) == {"t"}  # team u has no $0 row
    unpriced = charge[charge["kind"] == "unpriced"].set_index("team")
    assert unpriced.at["u", "gpu_hours"] == pytest.approx(10.0) and math.isnan(unpriced.at["u", "cost_usd"])
    capacity = charge[charge["kind"] == "unpriced_capacity"]
    assert capacity["gpu_hours"].tolist() == [pytest.approx(10.0)] and capacity["cost_usd"].isna().all()
    priced = charge[~charge["kind"].isin(["unpriced", "unpriced_capacity", "over_allocated"])]
    assert round(priced["cost_usd"].sum(), 2) == 40.0  # reconciles over what is priced


def test_a_case_different_model_name_finds_its_price():
    con = _load(prices=[{"gpu_model": "nvidia h100 80gb hbm3 ", "usd_per_gpu_hour": 4.0},
                        {"gpu_model": "MYSTERY GPU", "usd_per_gpu_hour": 1.0}],
                pods=[_pod("p", "n1", "GPU-a"), _pod("q", "n2", "GPU-b")])  # both nodes known to exist
    charge = analyses.run(con, "chargeback", **WINDOW)
    assert charge["fleet_cost_usd"].iloc[0] == pytest.approx(50.0)
    assert not charge["kind"].isin(["unpriced", "unpriced_capacity"]).any()


def test_allocation_beyond_capacity_is_capped_and_reported():
    con = _load(prices=[{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0},
                        {"gpu_model": "Mystery GPU", "usd_per_gpu_hour": 1.0}],
                pods=[_pod("greedy", "n1", "GPU-a", count=1000.0)])
    charge = analyses.run(con, "chargeback", **WINDOW)
    team = charge[charge["kind"] == "team"].iloc[0]
    assert team["cost_usd"] == pytest.approx(40.0)  # one GPU's worth, not 1000
    assert charge[charge["kind"] == "unallocated"]["cost_usd"].iloc[0] >= 0  # was -39,950
    over = charge[charge["kind"] == "over_allocated"].iloc[0]
    assert over["gpu_hours"] == pytest.approx(999 * 10.0) and math.isnan(over["cost_usd"])


def test_an_open_allocation_ends_when_its_node_stops_reporting():
    samples = [{"ts": T0 + pd.Timedelta(minutes=m), "node": node, "gpu_uuid": gpu, "gpu_util": 0.9,
                "namespace": "ns", "pod": pod}
               for node, gpu, pod, minutes in (("n1", "GPU-a", "live", 600), ("n2", "GPU-b", "gone", 120))
               for m in range(minutes)]
    con = _load(prices=[{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0},
                        {"gpu_model": "Mystery GPU", "usd_per_gpu_hour": 1.0}],
                pods=[_pod("live", "n1", "GPU-a"), _pod("gone", "n2", "GPU-b", team="g")], samples=samples)
    charge = analyses.run(con, "chargeback", **WINDOW).set_index("team")
    assert charge.at["g", "gpu_hours"] == pytest.approx(2.0, abs=0.05)  # not 10 h of a vanished node
    assert charge.at["t", "gpu_hours"] == pytest.approx(10.0, abs=0.05)


@pytest.mark.parametrize(("table", "row", "column"), [
    ("prices", {"gpu_model": "x", "usd_per_gpu_hour": math.inf}, "usd_per_gpu_hour"),
    ("prices", {"gpu_model": "x", "usd_per_gpu_hour": 1e20}, "usd_per_gpu_hour"),
    ("pods", {"namespace": "a", "pod": "p", "gpu_count": 1e9}, "gpu_count"),
])
def test_absurd_money_inputs_are_refused_at_load(table, row, column):
    con = store.connect(None)
    with pytest.raises(store.BundleError, match=rf"column '{column}', row 1: .* is not a plausible value"):
        store.load(con, {table: pd.DataFrame([row])}, source="test")


def test_every_total_says_what_is_unpriced_and_what_was_capped(tmp_path):
    """The analyze summary, the weekly report and (tests/test_app.py) the app each warn, in the
    analysis' own words, about GPU-hours that carry no cost; none of them totals them as dollars."""
    from gpuwatch.findings import command
    from gpuwatch.report import isoweek, weekly

    con = _load(prices=[{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0}],
                pods=[_pod("priced", "n1", "GPU-a", count=3.0), _pod("mystery", "n2", "GPU-b", team="u")])
    charge = analyses.run(con, "chargeback", **WINDOW)
    lines = chargeback.warnings(charge)
    assert [line.split(" ")[0] for line in lines] == ["10.0", "1", "1"]  # unpriced, unpriced GPUs, capped pods
    assert "no price" in lines[0] and "outside the fleet cost" in lines[1] and "20.0 GPU-hours" in lines[2]
    text = command.summary({"chargeback": charge}, start=WINDOW["start"], end=WINDOW["end"])
    assert "fleet cost $40.00 (priced GPUs only)" in text and "nan" not in text
    assert [line for line in text.splitlines() if line.startswith("warning: ")] == [f"warning: {x}" for x in lines]
    data = weekly.gather(con, isoweek.of(T0.to_pydatetime()), db_name="t.duckdb")
    html = (weekly.write(data, tmp_path, version="test")[0]).read_text()
    week_lines = chargeback.warnings(data.frames["chargeback"])  # the week: 168 h of each allocation
    assert len(week_lines) == 3 and all(f"Not in the totals: {line}." in html for line in week_lines)
    assert 'id="total-usd">$672.00<' in html  # 168 h x $4 of the one priced GPU


@pytest.mark.parametrize("values", [[1e20, 1e20, 3.3], [math.inf, 1.0], [math.nan, 1.0], [-1e300]])
def test_cent_rounding_is_bounded_whatever_reaches_it(values):
    """A price of 1e20 used to hang analyze (one loop turn per missing cent): now a DataError at once."""
    with pytest.raises(units.DataError, match="chargeback: an amount is not finite or above"):
        chargeback.fleet_cents(values, fleet=sum(values), stranded=0.0)


def test_a_pod_is_priced_by_its_own_gpus_model_not_its_nodes_other_one():
    """Found by the random-fleet law: on a node with two models, a pod used to take the node's min()
    model, so a pod on an unpriced GPU was charged at the other model's price."""
    con = _load(prices=[{"gpu_model": "NVIDIA H100 80GB HBM3", "usd_per_gpu_hour": 4.0}],
                devices=[{"node": "n1", "gpu_uuid": "GPU-a", "gpu_model": "NVIDIA H100 80GB HBM3"},
                         {"node": "n1", "gpu_uuid": "GPU-b", "gpu_model": "Zeta GPU"}],  # sorts after H100
                pods=[_pod("zeta", "n1", "GPU-b", team="u")])
    charge = analyses.run(con, "chargeback", **WINDOW)
    assert "u" not in set(charge.loc[charge["kind"] == "team", "team"])
    assert charge.loc[charge["kind"] == "unpriced", "team"].tolist() == ["u"]


def test_a_profile_price_does_not_price_an_instance_of_an_unpriced_gpu():
    """A "<model>/<profile>" row refines a priced GPU; alone it used to charge a pod for a GPU that is
    outside the fleet cost (unallocated went negative)."""
    mig = {"node": "n1", "gpu_uuid": "GPU-m", "gpu_model": "Mystery GPU", "mig_gi_id": 1, "mig_profile": "3g.40gb",
           "mig_profile_id": 9, "mig_placement_start": 0, "mig_placement_size": 4}
    pod = {**_pod("mig", "n1", "GPU-m"), "gpu_resource": "nvidia.com/mig-3g.40gb"}
    con = _load(prices=[{"gpu_model": "Mystery GPU/3g.40gb", "usd_per_gpu_hour": 2.0}], devices=[mig], pods=[pod])
    charge = analyses.run(con, "chargeback", **WINDOW)
    assert charge.loc[charge["kind"] == "unallocated", "cost_usd"].iloc[0] == 0.0  # was -20.00
    assert charge.loc[charge["kind"] == "unpriced", "team"].tolist() == ["t"]
