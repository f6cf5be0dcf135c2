"""What each finding can judge with the evidence it has (issue 32 item 1): findings.NEEDS names the
signals (gpuwatch/signals.py), signal_coverage.sql finds them in the store, findings/judgement.py
says judged / partly judged / not judged with the config that enables each missing signal.

Stores built from gpuwatch.fleet bundles with one signal taken out, as a GPU-Operator cluster
lacks it; the enabling counters lines are checked with the exporter's own counters-file reader.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpuwatch import analyses, signals, store
from gpuwatch.analyses.params import params
from gpuwatch.findings import ALL, NEEDS, findings, judgement
from gpuwatch.fleet import build_fleet
from gpuwatch.fleet import command as simulate
from gpuwatch.ingest import promframes
from gpuwatch.ingest.series import Context, Series

WINDOW = (dt.datetime(2026, 11, 9, 12), dt.datetime(2026, 11, 9, 18))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("bundle")
    simulate.write_bundle(build_fleet(gpus=16, seed=2, days=1), out)
    return out


def _store(path: Path, bundle: Path, **drop) -> Path:
    """The bundle loaded at ``path`` with sample columns emptied (``drop``: column -> nodes, None = all)."""
    from gpuwatch.store import bundle as bundles

    frames = {name: pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f)
              for name, f in bundles.find_files(bundle).items() if name != "truth"}
    samples = frames["samples"]
    for column, nodes in drop.items():
        hit = np.ones(len(samples), bool) if nodes is None else samples["node"].isin(nodes).to_numpy()
        samples.loc[hit, column] = np.nan
    con = store.connect(str(path))
    store.load(con, frames, source="test")
    con.close()
    return path


def _judged(path: Path) -> pd.DataFrame:
    con = store.connect(str(path), read_only=True)
    try:
        return findings(con, params(*WINDOW), only=("judgement",))["judgement"].set_index("finding")
    finally:
        con.close()


def test_every_signal_named_in_needs_is_declared():
    for finding, needs in NEEDS.items():
        assert finding in ALL, finding
        for source in needs.values():
            kind, _, name = source.partition(":")
            if name:
                assert kind in ("signal", "partial") and name in signals.SIGNALS, (finding, source)
            else:
                assert source in ALL or source in analyses.names(), (finding, source)


def test_enabling_counters_lines_are_rows_the_exporter_reads(tmp_path):
    """Every dcgm-exporter line doctor prints is a valid counters-file row (the exporter's own reader)."""
    from gpuwatch.exporter import counters

    rows = [text for s in signals.SIGNALS.values() for where, text in s.enable if where == signals.COUNTERS]
    path = tmp_path / "counters.csv"
    path.write_text("\n".join(dict.fromkeys(line for text in rows for line in text.splitlines())) + "\n")
    read = counters.read_counters(str(path), counters.gpuwatch_fields())
    assert {c.name for c in read} >= {"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
                                      "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_NVLINK_TX_BYTES"}
    assert signals.enable("sm_active")[0].endswith(
        "DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned.")


def test_without_sm_activity_false_utilization_is_not_judged(bundle, tmp_path):
    path = _store(tmp_path / "full.duckdb", bundle)
    con = store.connect(str(path), read_only=True)
    covered = analyses.run(con, "signal_coverage", **params(*WINDOW))
    con.close()
    assert set(covered["signal"]) == set(signals.SIGNALS), "signal_coverage.sql covers exactly the declared signals"
    full = _judged(path)
    assert (full.loc[["false_utilization", "busy_without_work", "utilization"], "state"] == "judged").all()
    blind = _judged(_store(tmp_path / "no-sm.duckdb", bundle, sm_active=None, sm_occupancy=None))
    row = blind.loc["false_utilization"]
    assert row["state"] == "not judged" and not row["judged"] and row["missing"] == "sm_active"
    assert "SM activity (DCGM_FI_PROF_SM_ACTIVE) missing on all 2 GPU node(s)" in row["reason"]
    assert "DCGM_FI_PROF_SM_ACTIVE, gauge, The ratio of cycles an SM has at least 1 warp assigned." in row["enable"]
    assert blind.loc["rightsizing", "state"] == "not judged"
    assert blind.loc["idle_hoarding", "state"] == "partly judged"  # idle is judged on GPU_UTIL alone
    line = judgement.line(blind.reset_index(), "false_utilization")
    assert line.startswith("not judged: SM activity") and "enable: dcgm-exporter counters file" in line


def test_sm_activity_on_some_nodes_is_partly_judged(bundle, tmp_path):
    blind = _judged(_store(tmp_path / "half.duckdb", bundle, sm_active=["gpu-node-001"]))
    row = blind.loc["false_utilization"]
    assert row["state"] == "partly judged" and row["judged"]
    assert row["reason"].endswith("missing on 1 of 2 GPU node(s): gpu-node-001")


def test_no_data_is_not_judged_never_fine():
    coverage = analyses.run(store.connect(None), "signal_coverage", start=WINDOW[0], end=WINDOW[1])
    verdict = judgement.judge(coverage, NEEDS, ALL).set_index("finding")
    # an empty store: no GPU node could carry any per-node signal, prices unknown: nothing claims "none found"
    assert verdict.loc["prices", "state"] == "judged"  # no GPUs: nothing to price
    assert judgement.judged(None, "false_utilization")  # no judgement at all: callers keep their figures


def _dcgm(pod: str | None = "train-0") -> Series:
    labels = {"UUID": "GPU-1", "gpu": "0", "Hostname": "node-a", "modelName": "NVIDIA H100 80GB HBM3"}
    if pod:
        labels |= {"exported_pod": pod, "exported_namespace": "ml", "pod": "dcgm-exporter-x", "namespace": "gpu-operator"}
    return Series("DCGM_FI_DEV_GPU_UTIL", labels, np.array([0.0, 60.0]), np.array([90.0, 90.0]))


def test_ingest_warns_when_kube_state_metrics_is_absent():
    frames = promframes.build([_dcgm()], Context(window_end=120.0, step=60.0))
    notes = frames["samples"].attrs["notes"]
    assert any(n.startswith("no kube-state-metrics series (kube_pod_info)") and "teams are their namespaces" in n
               for n in notes), notes


def test_ingest_warns_when_no_pod_carries_the_team_label():
    ksm = {"namespace": "ml", "pod": "train-0", "uid": "u-1"}
    series = [_dcgm(), Series("kube_pod_info", ksm | {"node": "node-a"}, np.array([0.0]), np.array([1.0])),
              Series("kube_pod_labels", ksm, np.array([0.0]), np.array([1.0]))]  # KSM's default: no label_*
    notes = promframes.build(series, Context(window_end=120.0, step=60.0))["samples"].attrs["notes"]
    assert any("no pod has the team label 'team' on kube_pod_labels: teams are the namespaces" in n
               and "metricLabelsAllowlist" in n for n in notes), notes
    labelled = [*series[:2], Series("kube_pod_labels", ksm | {"label_team": "nlp"}, np.array([0.0]), np.array([1.0]))]
    notes = promframes.build(labelled, Context(window_end=120.0, step=60.0))["samples"].attrs["notes"]
    assert not any("team label" in n or "kube-state-metrics series" in n for n in notes), notes
    # a cluster without GPU pods is not warned about pods it does not have
    assert not any("kube-state-metrics" in n for n in promframes.build([_dcgm(None)])["samples"].attrs["notes"])


def test_without_any_price_no_dollar_figure_reads_zero(bundle, tmp_path):
    """No price at all (no prices file, no --prices list): chargeback is not judged and every dollar
    figure of analyze's summary is unknown, never $0.00."""
    from gpuwatch.findings import command
    from gpuwatch.store import bundle as bundles

    frames = {name: pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f)
              for name, f in bundles.find_files(bundle).items() if name not in ("truth", "prices")}
    con = store.connect(str(tmp_path / "unpriced.duckdb"))
    store.load(con, frames, source="test")
    text = command.summary(command.analyze(con, params(*WINDOW)), start=WINDOW[0], end=WINDOW[1])
    con.close()
    head = text.split("\nrecommendations:")[0]  # the recommendations' evidence is in their own words
    assert "fleet cost: not judged: GPU prices missing; enable: gpuwatch ingest: gpuwatch ingest --prices" in text
    assert "$0.00" not in head and "unpriced" in head
    assert "savings unpriced/month" in text


def test_fleet_page_without_any_price_says_not_judged(bundle, tmp_path, monkeypatch):
    """The Fleet page on a store with no price: its dollar tiles read "unpriced" (it used to show
    $0.00 tiles, then fail on the teams' waste table), with the flag that enables prices."""
    from streamlit.testing.v1 import AppTest

    from gpuwatch.store import bundle as bundles
    from tests.conftest import ROOT

    frames = {name: pd.read_parquet(f) if f.suffix == ".parquet" else pd.read_csv(f)
              for name, f in bundles.find_files(bundle).items() if name not in ("truth", "prices")}
    con = store.connect(str(tmp_path / "unpriced.duckdb"))
    store.load(con, frames, source="test")
    con.close()
    monkeypatch.setenv("GPUWATCH_DB", str(tmp_path / "unpriced.duckdb"))
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=120).run()
    assert not at.exception, [e.value for e in at.exception]
    tiles = {m.label: m.value for m in at.metric}
    assert tiles["Fleet cost"] == tiles["Idle (all pods)"] == tiles["Unallocated"] == "unpriced", tiles
    assert any("GPU prices missing" in w.value for w in at.warning)
    assert any("gpuwatch ingest --prices prices.csv" in c.value for c in at.code)
