"""Persisted analysis results (analyses.persist / gpuwatch.analyses.persisted) on real DuckDB stores.

Checks that a store with persisted results gives the same frames (types and row order included;
floats to 1e-9, the noise of DuckDB's parallel sums between two fresh runs) and the same weekly
report as recomputing; that the stored rows are what ``run`` reads; and that other params, a
changed SQL or a later load are never answered from stale rows.
"""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import analyses, cli, store
from gpuwatch.analyses import persisted
from tests import app_support as support
from tests.test_report import skeleton


def _runs(con, params) -> dict:
    return {(name, str(extra)): analyses.run(con, name, **params, **extra)
            for name, variants in analyses.PERSISTED.items() for extra in variants}


def _params(con):
    from gpuwatch.analyses.params import params, window

    return params(*window(store.data_range(con)[1]))


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    """(plain store, the same data with persisted results, the window persisted)."""
    base = tmp_path_factory.mktemp("persisted")
    (base / "plain").mkdir()
    (base / "kept").mkdir()
    plain = support.load_sample(base / "plain" / "store.duckdb")  # one name: the report prints it
    kept = support.load_sample(base / "kept" / "store.duckdb")
    con = store.connect(str(kept))
    window = _params(con)
    assert analyses.persist(con, window) == sum(len(v) for v in analyses.PERSISTED.values())
    con.close()
    return plain, kept, window


def test_persisted_frames_equal_fresh_runs(stores):
    plain, kept, window = stores
    fresh = _runs(store.connect(str(plain), read_only=True), window)
    stored = _runs(store.connect(str(kept), read_only=True), window)
    for key, frame in fresh.items():
        assert len(frame), f"{key}: sample_data should give rows"
        pd.testing.assert_frame_equal(stored[key], frame, check_exact=False, rtol=1e-9, obj=str(key))


def test_run_reads_the_stored_rows(stores, tmp_path):
    _, kept, window = stores
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(kept.read_bytes())
    con = store.connect(str(copy))
    bound = {k: v for k, v in window.items() if k in analyses.body_params("idle_hoarding")}
    table = f"analysis_result_{persisted.key('idle_hoarding', analyses.sql('idle_hoarding'), bound)}"
    con.execute(f"UPDATE {table} SET pod = 'from-the-stored-table'")
    assert set(analyses.run(con, "idle_hoarding", **window)["pod"]) == {"from-the-stored-table"}


def test_other_params_are_computed_not_read(stores):
    plain, kept, window = stores
    other = {**window, "idle_below": 0.5}
    fresh = analyses.run(store.connect(str(plain), read_only=True), "idle_hoarding", **other)
    got = analyses.run(store.connect(str(kept), read_only=True), "idle_hoarding", **other)
    pd.testing.assert_frame_equal(got, fresh, check_exact=False, rtol=1e-9)
    default = analyses.run(store.connect(str(kept), read_only=True), "idle_hoarding", **window)
    assert got["idle_gpu_hours"].sum() > default["idle_gpu_hours"].sum()  # a different answer, not the stored one


def test_a_later_load_makes_stored_results_stale(stores, tmp_path):
    _, kept, window = stores
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(kept.read_bytes())
    con = store.connect(str(copy))
    before = analyses.run(con, "chargeback", **window)
    prices = con.execute("SELECT gpu_model, usd_per_gpu_hour * 2 AS usd_per_gpu_hour FROM prices").df()
    store.load(con, {"prices": prices}, source="test: prices doubled")
    after = analyses.run(con, "chargeback", **window)
    assert after["fleet_cost_usd"].iloc[0] == pytest.approx(2 * before["fleet_cost_usd"].iloc[0], abs=0.02)
    # persisting again drops the stale results instead of piling up tables
    stored = analyses.persist(con, window)
    tables = [t for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall()
              if t.startswith("analysis_result_")]
    assert len(tables) == stored == len(con.execute("SELECT * FROM analysis_results").fetchall())
    assert analyses.run(con, "chargeback", **window)["fleet_cost_usd"].iloc[0] == after["fleet_cost_usd"].iloc[0]


def test_persisting_the_same_data_again_computes_nothing(stores, tmp_path):
    _, kept, window = stores
    copy = tmp_path / "copy.duckdb"
    copy.write_bytes(kept.read_bytes())
    con = store.connect(str(copy))
    saved = "SELECT key, saved_at FROM analysis_results ORDER BY key"
    before = con.execute(saved).fetchall()
    assert analyses.persist(con, window) == len(before)  # a cycle with no new data: every result current
    assert con.execute(saved).fetchall() == before
    later = {**window, "end": window["end"] + pd.Timedelta(hours=1), "start": window["start"] + pd.Timedelta(hours=1)}
    analyses.persist(con, later)  # another window: its results computed and stored beside them
    after = dict(con.execute(saved).fetchall())
    assert len(after) > len(before) and all(after[k] == at for k, at in before)


def test_a_changed_sql_text_is_a_different_key(stores):
    _, _, window = stores
    bound = {k: v for k, v in window.items() if k in analyses.body_params("chargeback")}
    text = analyses.sql("chargeback")
    assert persisted.key("chargeback", text, bound) != persisted.key("chargeback", text + "\n-- edited", bound)
    assert persisted.key("chargeback", text, bound) != persisted.key("chargeback", text, {**bound, "idle_below": 0.1})


def test_weekly_report_is_the_same_from_persisted_results(stores, tmp_path):
    plain, kept, _ = stores
    pages = {}
    for label, db in (("plain", plain), ("kept", kept)):
        out = tmp_path / label
        assert cli.main(["report", "weekly", "--db", str(db), "--out", str(out)]) == 0
        pages[label] = {p.name: skeleton(p.read_text()) for p in out.glob("*.html")}
        pages[label]["chargeback.csv"] = (out / "chargeback.csv").read_text()
    assert pages["kept"] == pages["plain"]


def test_analyze_computing_some_findings_on_a_second_connection_gives_the_same_frames(stores):
    from gpuwatch.findings import command, findings
    from gpuwatch.findings.command import OUTPUTS

    _, kept, window = stores
    con = store.connect(str(kept), read_only=True)
    ahead = command.analyze(con, window)  # command.AHEAD computed on store.cursor(con), beside the rest
    plain = findings(con, window, only=OUTPUTS)
    assert set(command.AHEAD) <= set(ahead)
    for name in OUTPUTS:
        pd.testing.assert_frame_equal(ahead[name], plain[name], obj=name)
    con.close()
