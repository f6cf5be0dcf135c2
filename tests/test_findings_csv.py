"""`gpuwatch analyze --out` CSVs: every row carries data_as_of (the reclaim controller acts on no
findings without it, tests/test_reclaim_freshness.py), and text cells a spreadsheet would run as a
formula are neutralised in every CSV gpuwatch writes, numbers untouched."""

from __future__ import annotations

import pandas as pd

from gpuwatch.cli import main
from gpuwatch.findings import csvfile
from gpuwatch.reclaim.freshness import csv_as_of
from tests.support.bundles import SAMPLE_DATA


def test_analyze_csvs_carry_the_data_as_of_time_reclaim_reads(tmp_path):
    assert main(["analyze", "--db", str(tmp_path / "s.db"), "--input", str(SAMPLE_DATA), "--out", str(tmp_path / "o")]) == 0
    idle = pd.read_csv(tmp_path / "o" / "idle_hoarding.csv")
    assert len(idle) and idle["data_as_of"].nunique() == 1
    as_of, problem = csv_as_of(idle, source="idle_hoarding.csv")
    assert problem == "" and as_of.strftime("%Y-%m-%dT%H:%M") == "2026-11-15T23:59"  # sample_data's last minute
    for path in (tmp_path / "o").glob("*.csv"):
        assert "data_as_of" in pd.read_csv(path, nrows=0).columns, path.name


def test_formula_cells_are_neutralised_and_numbers_are_not():
    frame = pd.DataFrame({"team": ["=HYPERLINK(\"x\")", "+1", "-cmd", "@SUM(A1)", "\tx", "ok", None],
                          "cost_usd": [-1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]})
    out = csvfile.safe(frame)
    assert out["team"].tolist()[:6] == ["'=HYPERLINK(\"x\")", "'+1", "'-cmd", "'@SUM(A1)", "'\tx", "ok"]
    assert pd.isna(out["team"].iloc[6])
    assert out["cost_usd"].tolist() == frame["cost_usd"].tolist()
    assert frame["team"].iloc[0].startswith("=")  # the caller's frame is not changed
