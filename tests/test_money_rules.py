"""The money rules staging applies silently, decided and reported (issue 31, item 12): duplicate copies
of one sample that disagree give an unknown value (never the max: a stray copy at 0.99 hid every
hoarder), copies that agree or where only one knows a value keep it; a pod listed with gpu_count 0
whose samples show it on a GPU pays for those samples at the device's price (it paid $0). Both are
counted in data_coverage and reported by `gpuwatch analyze`.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params
from gpuwatch.cli import main

T0 = pd.Timestamp("2026-11-09T00:00:00")
WINDOW = params(T0.to_pydatetime(), (T0 + pd.Timedelta(hours=4)).to_pydatetime())
MODEL = "NVIDIA H100 80GB HBM3"


def _frames(*, copies: list[float | None], gpu_count: float = 1.0) -> dict[str, pd.DataFrame]:
    """One pod on one $4/h GPU for 4 hours, sampled every minute at 1% utilization; each extra value in
    ``copies`` adds a copy of every sample (another container of the pod: the same stream and time)."""
    samples = [{"ts": T0 + pd.Timedelta(minutes=m), "node": "n1", "gpu_uuid": "GPU-a", "namespace": "ns", "pod": "p",
                "container": f"c{i}", "gpu_util": value, "sm_active": 0.01 if value is not None else None}
               for m in range(240) for i, value in enumerate([0.01, *copies])]
    return {"devices": pd.DataFrame([{"node": "n1", "gpu_uuid": "GPU-a", "gpu_model": MODEL}]),
            "prices": pd.DataFrame([{"gpu_model": MODEL, "usd_per_gpu_hour": 4.0}]),
            "pods": pd.DataFrame([{"namespace": "ns", "pod": "p", "node": "n1", "team": "t", "start_ts": T0,
                                   "end_ts": T0 + pd.Timedelta(hours=4), "gpu_resource": "nvidia.com/gpu",
                                   "gpu_count": gpu_count, "device_ids": "GPU-a"}]),
            "samples": pd.DataFrame(samples)}


def _run(frames):
    con = store.connect(None)
    store.load(con, frames, source="test")
    idle = analyses.run(con, "idle_hoarding", **WINDOW)
    charge = analyses.run(con, "chargeback", **WINDOW)
    coverage = analyses.run(con, "data_coverage")
    con.close()
    return idle, charge[charge["kind"] == "team"], coverage.iloc[0]


def test_copies_that_agree_or_fill_a_gap_keep_the_value():
    for copies in ([0.01], [None]):
        idle, team, coverage = _run(_frames(copies=copies))
        assert bool(idle.set_index("pod").at["p", "hoarder"]) and team["idle_usd"].sum() == 16.0
        assert coverage["conflicted_samples"] == 0


def test_a_conflicting_copy_makes_the_value_unknown_not_the_max():
    """Regression: duplicates merged with max(), so a copy at 0.99 made an idle pod productive ($16 of
    idle billed as productive, the hoarder gone). Now the value is unknown: neither idle nor productive,
    billed as unobserved, and counted."""
    idle, team, coverage = _run(_frames(copies=[0.99]))
    assert "p" not in set(idle.loc[idle["hoarder"].astype(bool), "pod"])
    assert team["productive_usd"].sum() == 0 and team["idle_usd"].sum() == 0
    assert team["unobserved_usd"].sum() == team["cost_usd"].sum() == 16.0
    assert coverage["conflicted_samples"] == 240


def test_a_pod_listed_with_no_gpu_pays_for_the_samples_that_show_it_on_one():
    """Regression: a pod with gpu_count 0 but samples on a GPU was charged $0 (its samples stood for 0
    GPUs at $0); now they stand for the device, at its price, and the rule is counted."""
    _, team, coverage = _run(_frames(copies=[], gpu_count=0.0))
    assert team["cost_usd"].sum() == pytest.approx(16.0) and team["idle_usd"].sum() == pytest.approx(16.0)
    assert coverage["zero_count_pods"] == 1


def test_analyze_reports_each_rule_that_applied(tmp_path, capsys):
    frames = _frames(copies=[0.99], gpu_count=0.0)
    db = tmp_path / "s.db"
    con = store.connect(str(db))
    store.load(con, frames, source="test")
    con.close()
    assert main(["analyze", "--db", str(db), "--format", "table"]) == 0
    err = capsys.readouterr().err
    assert "240 sample(s) had duplicate copies that disagree: their values are unknown" in err
    assert "1 pod(s) listed with gpu_count 0 have samples on a GPU: charged for those samples" in err


def test_false_time_on_an_unpriced_gpu_costs_an_unknown_amount_never_zero():
    """A model without a price: its pods' false-utilization time is still counted, its dollars are
    unknown (NULL), never $0.00; a pod with no false time costs nothing whatever its price."""
    from gpuwatch.store import bundle
    from tests.app_support import sample_bundle

    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(sample_bundle()).items() if name != "truth"}
    frames["prices"] = frames["prices"][~frames["prices"]["gpu_model"].str.contains("H100")]
    con = store.connect(None)
    store.load(con, frames, source="no H100 price")
    start, end = store.data_range(con)
    frame = analyses.run(con, "false_utilization", **params(start, end))
    h100 = {r[0] for r in con.execute("SELECT DISTINCT node FROM devices WHERE gpu_model LIKE '%H100%'").fetchall()}
    on_h100 = frame[frame["node"].isin(h100) & (frame["false_util_gpu_hours"] > 0)]
    assert len(on_h100) and on_h100["false_util_cost_usd"].isna().all()
    assert (frame.loc[frame["false_util_gpu_hours"] == 0, "false_util_cost_usd"] == 0).all()
    priced = frame[~frame["node"].isin(h100) & (frame["false_util_gpu_hours"] > 0)]
    assert len(priced) and (priced["false_util_cost_usd"] > 0).all()
