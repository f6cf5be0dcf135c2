"""A GPU costs money only while it is known to exist (issue 31, items 1 and 2): its sample runs (gaps up
to presence_gap_seconds bridged, one step either side) or allocations on its node, never every device x
the whole window; the default window is clipped to the data; the window's end is the latest sample of
any device at or before the analysis' own clock (a fleet that shrinks overnight keeps its latest data;
samples dated after the clock are reported and left out). CLI, chargeback, fleet_timeseries and the
weekly report agree.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params, window
from gpuwatch.cli import main

T0 = pd.Timestamp("2026-11-09T00:00:00")
PRICE = 2.0  # USD per GPU-hour
MODEL = "NVIDIA H100 80GB HBM3"


def _frames(reporting: dict[str, tuple[float, float]], *, step_s: float = 300.0) -> dict[str, pd.DataFrame]:
    """Two GPUs per node; each node samples every ``step_s`` from hour a to hour b (b exclusive)."""
    devices, samples = [], []
    for node, (a, b) in reporting.items():
        for g in range(2):
            uuid = f"GPU-{node}-{g}"
            devices.append({"node": node, "gpu_uuid": uuid, "gpu_model": MODEL})
            t = a * 3600
            while t < b * 3600:
                samples.append({"ts": T0 + pd.Timedelta(seconds=t), "node": node, "gpu_uuid": uuid, "gpu_util": 0.5})
                t += step_s
    return {"devices": pd.DataFrame(devices), "samples": pd.DataFrame(samples),
            "prices": pd.DataFrame([{"gpu_model": MODEL, "usd_per_gpu_hour": PRICE}])}


def _loaded(frames) -> object:
    con = store.connect(None)
    store.load(con, frames, source="test")
    return con


def _fleet(con, start, end) -> tuple[float, float, float]:
    """(chargeback fleet cost, Σ of its rows, fleet_timeseries' window fleet cost) over [start, end)."""
    p = params(start, end)
    charge = analyses.run(con, "chargeback", **p)
    fleet = analyses.run(con, "fleet_timeseries", **p, bucket_seconds=3600)
    window_row = fleet[fleet["scope"] == "window"]
    series = float(window_row["fleet_cost_usd"].iloc[0]) if len(window_row) else 0.0
    return float(charge["fleet_cost_usd"].iloc[0]), round(float(charge["cost_usd"].sum()), 2), series


def test_one_day_of_data_is_billed_one_day_not_the_default_week():
    """Regression: the default 7-day window billed every device for 7 days (the issue's $8,467.20 for
    $1,209.60 of fleet); a node scaled away after 6 hours was billed as unallocated for the rest."""
    con = _loaded(_frames({"a": (0, 24), "b": (0, 6)}))
    first, last = store.data_range(con, now=datetime(2026, 11, 20))
    start, end = window(last, first_ts=first)
    assert (start, end) == (T0.to_pydatetime(), (T0 + pd.Timedelta(days=1)).to_pydatetime())
    expected = PRICE * (2 * 24 + 2 * 6)  # node b: its 6 hours (+ one step after its last sample: 06:00)
    for lo in (start, end - timedelta(days=7)):  # the clipped window and the whole 7 days: same money
        fleet, parts, series = _fleet(con, lo, end)
        assert fleet == pytest.approx(expected) and parts == pytest.approx(expected) and series == pytest.approx(expected)
    # the day after node b left: only node a's hours, node b not billed as unallocated
    assert _fleet(con, T0 + pd.Timedelta(hours=12), T0 + pd.Timedelta(hours=24))[0] == pytest.approx(PRICE * 2 * 12)
    # a week with no data at all bills nothing
    assert _fleet(con, T0 + pd.Timedelta(days=7), T0 + pd.Timedelta(days=14)) == (0.0, 0.0, 0.0)


def test_eighty_seconds_of_data_are_not_billed_as_an_hour():
    """Regression: ~80 s of data on a fresh Prometheus was billed as a whole hour, 14 minutes of it in
    the future. Now: 15 s samples over 75 s cover 75 s + one step after (none before the data)."""
    con = _loaded(_frames({"a": (10, 10 + 80 / 3600)}, step_s=15.0))
    first, last = store.data_range(con, now=datetime(2026, 11, 20))
    start, end = window(last, first_ts=first)
    assert end - start == timedelta(hours=1)
    assert _fleet(con, start, end)[0] == pytest.approx(round(PRICE * 2 * 90 / 3600, 2))


def test_a_gap_longer_than_the_tolerance_is_not_billed():
    """A node gone for 5 hours and back: the gap costs nothing; a 30-minute scrape outage is bridged."""
    frames = _frames({"a": (0, 24)})
    samples = frames["samples"]
    hour = (samples["ts"] - T0).dt.total_seconds() / 3600
    frames["samples"] = samples[~((hour >= 5) & (hour < 10)) & ~((hour >= 15) & (hour < 15.5))]
    con = _loaded(frames)
    # 24 h less the 5 hours without samples (04:55 stands for its step to 05:00, 10:00 for the step from
    # 09:55): 4 h 55 min unbilled; the 30-min outage is bridged
    assert _fleet(con, T0, T0 + pd.Timedelta(days=1))[0] == pytest.approx(round(PRICE * 2 * (19 + 5 / 60), 2))


def test_the_end_keeps_the_latest_data_of_a_fleet_that_shrinks_overnight():
    """Regression: the end was where at least half of the devices active the day before still
    reported, so a pool scaled from 10 nodes to 2 at 20:00 lost the survivors' last 4 hours (their
    hoarders, "reclaimable now"). Now the latest sample of any device at or before the clock counts."""
    con = _loaded(_frames({**{f"n{i}": (0, 20) for i in range(8)}, "s0": (0, 24), "s1": (0, 24)}))
    assert store.data_range(con, now=datetime(2026, 11, 20))[1] == (T0 + pd.Timedelta(hours=24, minutes=-5)).to_pydatetime()


def test_samples_after_the_analysis_clock_are_reported_and_left_out(tmp_path, capsys):
    """A node whose clock runs hours ahead neither moves the window's end nor is billed past the clock."""
    con = _loaded(_frames({"a": (0, 12), "b": (0, 18)}))
    now = (T0 + pd.Timedelta(hours=12)).to_pydatetime()
    assert store.data_range(con, now=now)[1] == now
    samples, devices, latest = store.ahead_of_clock(con, now=now)
    assert (samples, devices) == (2 * 6 * 12 - 2, 2) and latest == (T0 + pd.Timedelta(hours=18, minutes=-5)).to_pydatetime()
    con.close()
    # the CLI against the wall clock: data dated 2-14 hours ahead is left out, with a warning on stderr
    future = _frames({"a": (0, 12)})
    future["samples"]["ts"] = pd.Timestamp.now("UTC").tz_localize(None).floor("h") + pd.Timedelta(hours=2) \
        + (future["samples"]["ts"] - T0)
    db = tmp_path / "s.db"
    con = store.connect(str(db))
    store.load(con, {**_frames({"a": (0, 12)}), "samples": pd.concat([_frames({"a": (0, 12)})["samples"],
                                                                          future["samples"]])}, source="test")
    con.close()
    assert main(["analyze", "--db", str(db), "--format", "table"]) == 0
    out = capsys.readouterr()
    assert "gpuwatch analysis 2026-11-09 00:00 .. 2026-11-09 12:00 UTC" in out.out
    assert "fleet cost $48.00" in out.out
    assert "288 sample(s) of 2 device(s) are dated after this machine's clock" in out.err


def test_cli_bills_one_day_of_data_for_one_day(tmp_path, capsys):
    """The issue's figure, through `gpuwatch analyze` with its default 7-day window: the fleet costs
    the day the data covers, and the chargeback rows add up to it."""
    db = tmp_path / "s.db"
    con = store.connect(str(db))
    store.load(con, _frames({"a": (0, 24), "b": (0, 24)}), source="test")
    con.close()
    assert main(["analyze", "--db", str(db), "--out", str(tmp_path / "out")]) == 0
    charge = pd.read_csv(tmp_path / "out" / "chargeback.csv")
    assert round(charge["cost_usd"].sum(), 2) == PRICE * 4 * 24


def test_a_week_without_data_bills_nothing_even_with_min_coverage_zero(tmp_path):
    """Regression: `report weekly --week <a week without data> --min-coverage 0` billed the whole fleet
    for that week; an allocation left open (no end) must not carry the fleet into it either."""
    frames = _frames({"a": (0, 24)})
    frames["pods"] = pd.DataFrame([{"namespace": "ns", "pod": "p", "node": "a", "team": "t", "start_ts": T0,
                                    "end_ts": pd.NaT, "gpu_resource": "nvidia.com/gpu", "gpu_count": 1.0,
                                    "device_ids": "GPU-a-0"}])
    db = tmp_path / "s.db"
    con = store.connect(str(db))
    store.load(con, frames, source="test")
    # the open allocation ends where its node's samples end: day one costs 2 GPUs x 24 h, W47 nothing
    assert _fleet(con, T0, T0 + pd.Timedelta(days=7))[0] == pytest.approx(PRICE * 2 * 24)
    assert _fleet(con, T0 + pd.Timedelta(days=7), T0 + pd.Timedelta(days=14)) == (0.0, 0.0, 0.0)
    con.close()
    out = tmp_path / "report"
    assert main(["report", "weekly", "--db", str(db), "--week", "2026-W47", "--min-coverage", "0", "--out", str(out)]) == 0
    charge = pd.read_csv(out / "chargeback.csv")
    assert charge["cost_usd"].sum() == 0.0
