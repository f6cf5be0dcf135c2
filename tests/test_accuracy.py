"""Findings against the simulator's ground truth (truth.csv): hoarders and false-utilization pods
are found with precision and recall >= 0.98, on the shipped sample_data and on a second seed; and
the numbers sample_data/README.md promises are the numbers the analyses produce.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest

from gpuwatch import analyses
from gpuwatch import fleet as workloads
from gpuwatch.fleet.command import write_bundle
from tests.support.bundles import SAMPLE_DATA, loaded


def _scores(found: pd.DataFrame, flag: str, truth: pd.DataFrame, behavior: str) -> tuple[float, float]:
    merged = truth.merge(found[["namespace", "pod", flag]], on=["namespace", "pod"], how="left")
    predicted = merged[flag].fillna(False).astype(bool)
    actual = merged["behavior"] == behavior
    tp = int((predicted & actual).sum())
    return tp / max(int(predicted.sum()), 1), tp / max(int(actual.sum()), 1)


@pytest.fixture(scope="module", params=["sample_data", "seed 1"])
def fleet(request, tmp_path_factory):
    path = SAMPLE_DATA
    if request.param == "seed 1":
        path = tmp_path_factory.mktemp("seed1")
        write_bundle(workloads.build_fleet(gpus=64, seed=1, days=7), path, step=60)
    con, params = loaded(path)
    yield con, params, pd.read_csv(path / "truth.csv")
    con.close()


def test_hoarders_match_truth(fleet):
    con, params, truth = fleet
    precision, recall = _scores(analyses.run(con, "idle_hoarding", **params), "hoarder", truth, "hoarder")
    assert precision >= 0.98 and recall >= 0.98, (precision, recall)


def test_false_util_pods_match_truth(fleet):
    con, params, truth = fleet
    precision, recall = _scores(analyses.run(con, "false_utilization", **params), "offender", truth, "false_util")
    assert precision >= 0.98 and recall >= 0.98, (precision, recall)


def _readme_number(label: str) -> float:
    """The number on the README line that starts with ``- **<label>**``."""
    text = (SAMPLE_DATA / "README.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"- **{label}**"))
    return float(re.search(r"([\d,]+(?:\.\d+)?)", line.split("**")[2]).group(1).replace(",", ""))


def test_sample_data_readme_numbers():
    con, params = loaded()
    idle = analyses.run(con, "idle_hoarding", **params)
    false = analyses.run(con, "false_utilization", **params)
    charge = analyses.run(con, "chargeback", **params)
    assert idle["hoarder"].sum() == _readme_number("Hoarders")
    assert false["offender"].sum() == _readme_number("False-utilization pods")
    assert charge["fleet_cost_usd"].iloc[0] == _readme_number("Fleet cost")
    assert charge.loc[charge["kind"] == "unallocated", "cost_usd"].iloc[0] == _readme_number("Unallocated cost")
    stranded = charge.loc[charge["kind"] == "stranded", "cost_usd"].iloc[0]
    assert stranded == _readme_number("Stranded MIG cost")
    if "mig_fragmentation" in analyses.names():
        frag = analyses.run(con, "mig_fragmentation", **params)
        assert frag["stranded_slices"].sum() == _readme_number("Stranded MIG slices")
    per_team = charge[charge["kind"] == "team"].groupby("team")["cost_usd"].sum().round(2)
    for team in ("nlp", "vision", "recsys", "research", "platform"):
        assert per_team[team] == _readme_number(f"Team {team}"), team
    con.close()
