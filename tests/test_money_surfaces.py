"""One number, one rounding (issue 31, item 11): every surface that shows a money figure on sample_data
shows the same cents: each pod's figure is rounded once (staging.sql's usd_cents) and every total is a
sum of those cents, so false utilization, idle and team totals agree between the CLI, the app's pages,
chargeback (and the weekly report built on it), the derived metrics and `--group-by`; one label, one
definition ("too small" = runs failing at their device's memory limit, never host OOMKills).
"""

from __future__ import annotations

import re

import pytest

from gpuwatch import analyses
from gpuwatch.analyses import chargeback as chargeback_analysis
from gpuwatch.findings import command, exporter, findings, too_small
from tests.support.bundles import loaded

pytest.importorskip("streamlit")


@pytest.fixture(scope="module")
def sample():
    con, p = loaded()
    results = findings(con, p)
    yield con, p, results
    con.close()


def _cents(value: float) -> str:
    return f"${value:,.2f}"


def _whole_cents(series) -> bool:
    return bool(((series.dropna() * 100).round(6) % 1 == 0).all())


def test_every_pod_figure_is_rounded_once_to_whole_cents(sample):
    _, _, r = sample
    for name, column in (("idle_hoarding", "idle_cost_usd"), ("false_utilization", "false_util_cost_usd"),
                         ("utilization", "cost_usd"), ("mig_mismatch", "usd_burnt")):
        assert _whole_cents(r[name][column]), (name, column)
    # the pod: $258.505 of idle, shown as $258.50 on one page and $258.51 on another before
    idle = r["idle_hoarding"].set_index("pod")
    assert idle.at["hugo-nb215-0", "idle_cost_usd"] == 258.50  # half to even, as everywhere
    assert chargeback_analysis.cents(258.505) == 25850 and chargeback_analysis.cents(0.015) == 2
    assert chargeback_analysis.cents(2650.7309523) == 265073


def test_false_utilization_and_idle_are_one_figure_on_every_surface(sample):
    """Regression: false-util was $2,650.74 on Fleet/Chargeback/report/metrics (largest-remainder cents
    per team) and $2,650.73 on its own page and the CLI (the pods' unrounded sum)."""
    _, p, r = sample
    charge, false, idle = r["chargeback"], r["false_utilization"], r["idle_hoarding"]
    teams = charge[charge["kind"] == "team"]
    offenders = false[false["offender"]]
    fleet_page = _cents(teams["false_util_usd"].sum())  # Fleet, Chargeback and the weekly report's tiles
    assert fleet_page == _cents(false["false_util_cost_usd"].sum()) == _cents(offenders["false_util_cost_usd"].sum())
    assert fleet_page == "$2,650.73"
    summary = command.summary(r, start=p["start"], end=p["end"])
    assert f"false utilization: {len(offenders)} pods, {fleet_page}" in summary
    waste = exporter._waste(charge, idle, false)  # the derived metrics' gpuwatch_waste_usd
    assert _cents(sum(v for (_, _, kind), v in waste if kind == "false_util")) == fleet_page
    assert _cents(sum(v for (_, _, kind), v in waste if kind == "idle")) == _cents(teams["idle_usd"].sum()) \
        == _cents(idle["idle_cost_usd"].sum())


def test_group_by_does_not_move_a_team_total(sample):
    """Regression: `--group-by` rounded other leaves, moving team totals by a cent."""
    con, p, r = sample
    plain = r["chargeback"]
    grouped = analyses.run(con, "chargeback", **{**p, "group_by": "cost_center"})
    for frame in (plain, grouped):
        assert round(frame["cost_usd"].sum(), 2) == frame["fleet_cost_usd"].iloc[0]
    totals = [f[f["kind"] == "team"].groupby("team")[[*chargeback_analysis.PARTS, "cost_usd"]].sum().round(2)
              for f in (plain, grouped)]
    assert totals[0].equals(totals[1])


def test_too_small_has_one_definition(sample, tmp_path, monkeypatch):
    """Regression: "burnt by too-small slices" was $3.00 in the app (every mismatch row, host OOMKills
    included) and $2.49 in the CLI (runs failing at the device's memory limit)."""
    from tests.app_support import load_sample
    from tests.test_app import metric, open_page

    _, p, r = sample
    fit = r["mig_mismatch"]
    small = too_small(fit)
    assert (fit["cause"] == "host_memory").any() and len(small) < len(fit)  # both kinds in sample_data
    figure = _cents(small["usd_burnt"].sum())
    line = re.search(r"MIG/GPU too small: \d+ pods failing at their memory limit, (\$[\d,.]+) burnt",
                     command.summary(r, start=p["start"], end=p["end"]))
    assert line and line.group(1) == figure
    db = load_sample(tmp_path / "sample.duckdb")
    at = open_page(db, "health", monkeypatch)
    assert metric(at, "Burnt by too-small slices") == figure
