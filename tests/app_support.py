"""Databases for the app and report tests: sample_data loaded into a real DuckDB store, and variants.

Not a test module: imported by tests/test_app*.py and tests/test_report*.py.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from tests.conftest import ROOT

SAMPLE = ROOT / "sample_data"
EVIL_TEAM = "<script>alert(1)</script>"
EVIL_NAMESPACE = "x'; drop table samples; --"


def sample_bundle() -> Path:
    if not any(SAMPLE.glob("samples.*")):
        pytest.skip("sample_data/ has no samples file yet")
    return SAMPLE


def load_sample(path: Path) -> Path:
    """sample_data loaded into a fresh store at ``path``."""
    from gpuwatch import store

    con = store.connect(str(path))
    store.load_bundle(con, sample_bundle())
    con.close()
    return path


def load_unpriced(path: Path) -> Path:
    """sample_data whose price list lacks the A100: those GPUs and the pods on them are unpriced."""
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.store import bundle

    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(sample_bundle()).items() if name != "truth"}
    frames["prices"] = frames["prices"][~frames["prices"]["gpu_model"].str.contains("A100")]
    con = store.connect(str(path))
    store.load(con, frames, source="unpriced")
    con.close()
    return path


def load_hostile(path: Path) -> Path:
    """sample_data with one team renamed to a script tag and one namespace to an SQL injection."""
    import pandas as pd

    from gpuwatch import store
    from gpuwatch.store import bundle

    # read with pandas itself: the store's batch readers are its own business (and change)
    frames = {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
              for name, file in bundle.find_files(sample_bundle()).items() if name != "truth"}
    pods = frames["pods"]
    notebooks = sorted(pods.loc[pods["owner_kind"] == "Notebook", "namespace"].unique())
    victim_ns = notebooks[0]  # notebooks hoard: the renamed namespace shows up on every page
    victim_team = sorted(pods.loc[pods["team"].fillna("") != "", "team"].unique())[0]
    pods["team"] = pods["team"].astype(object).replace({victim_team: EVIL_TEAM})
    for name in ("pods", "samples"):  # Parquet may hand back categoricals: rename as plain text
        frames[name]["namespace"] = frames[name]["namespace"].astype(object).replace({victim_ns: EVIL_NAMESPACE})
    con = store.connect(str(path))
    store.load(con, frames, source="hostile")
    con.close()
    return path


WORDS = ("computer-vision-research", "nlp", "recommendation-systems-platform", "ads", "speech-and-audio",
         "robotics-simulation", "search-ranking", "fraud")


def team_names(n: int) -> list[str]:
    """``n`` team names, short and long (the longest ones test label space)."""
    return [f"{WORDS[i % len(WORDS)]}-{i:02d}" for i in range(n)]


def _frames(source: Path | None = None) -> dict:
    import pandas as pd

    from gpuwatch.store import bundle

    return {name: pd.read_parquet(file) if file.suffix == ".parquet" else pd.read_csv(file)
            for name, file in bundle.find_files(source or sample_bundle()).items() if name != "truth"}


def load_many_teams(path: Path, *, teams: int, source: Path | None = None) -> Path:
    """A bundle (default sample_data) with every pod labelled with one of ``teams`` team names (spread evenly)."""
    from gpuwatch import store

    frames = _frames(source)
    frames.pop("teams", None)
    pods = frames["pods"].sort_values(["namespace", "pod"]).reset_index(drop=True)
    names = team_names(teams)
    pods["team"] = [names[i % teams] for i in range(len(pods))]
    frames["pods"] = pods
    con = store.connect(str(path))
    store.load(con, frames, source=f"{teams} teams")
    con.close()
    return path


def simulate(out: Path, *, gpus: int, days: int, seed: int = 3, step: int = 300) -> Path:
    """A simulated bundle (the real `gpuwatch simulate`), e.g. for a store with hundreds of pods."""
    from gpuwatch import cli

    assert cli.main(["simulate", "--gpus", str(gpus), "--days", str(days), "--seed", str(seed), "--step", str(step),
                     "--out", str(out)]) == 0
    return out


def load_one_pod(path: Path) -> Path:
    """sample_data cut down to one pod on one GPU (its device rows and samples only): one row everywhere."""
    from gpuwatch import store

    frames = _frames()
    pods = frames["pods"]
    pod = pods[(pods["owner_kind"] == "Notebook") & (pods["gpu_count"] == 1)].sort_values("pod").iloc[[0]]
    samples = frames["samples"]
    mine = samples[(samples["namespace"] == pod["namespace"].iloc[0]) & (samples["pod"] == pod["pod"].iloc[0])]
    gpus = set(mine["gpu_uuid"])
    frames = {"pods": pod, "samples": mine, "prices": frames["prices"],
              "devices": frames["devices"][frames["devices"]["gpu_uuid"].isin(gpus)]}
    con = store.connect(str(path))
    store.load(con, frames, source="one pod")
    con.close()
    return path


def add_audit_rows(path: Path, rows: list[dict]) -> None:
    """Append reclaim_audit rows the way the reclaim controller would (a plain INSERT)."""
    import pandas as pd

    from gpuwatch import store

    con = store.connect(str(path))
    con.register("new_rows", pd.DataFrame(rows))
    con.execute("INSERT INTO reclaim_audit BY NAME SELECT * FROM new_rows")
    con.close()


def audit_row(**overrides) -> dict:
    row = {"ts": dt.datetime(2026, 11, 15, 12, 0), "run_id": "run-1", "decision": "would_act",
           "action": "stop_notebook", "dry_run": True, "namespace": "research-notebooks", "pod": "alice-nb1-0",
           "owner_kind": "Notebook", "owner_name": "alice-nb1", "team": "research", "reason": "idle 6h",
           "idle_since": dt.datetime(2026, 11, 15, 6, 0), "gpu_count": 1.0, "usd_per_hour": 4.1,
           "recommendation_id": "rec-1", "result": "dry_run", "detail": ""}
    return {**row, **overrides}
