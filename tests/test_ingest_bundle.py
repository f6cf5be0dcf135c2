"""Bundle ingest (`gpuwatch ingest --from DIR`): validation errors name file, column and row, and a
failed load leaves the store exactly as it was; any subset of the files loads; CSV and Parquet agree.
"""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses.params import params, window
from gpuwatch.cli import main
from tests.support.bundles import SAMPLE_DATA


def _bundle(tmp_path, **frames):
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, frame in frames.items():
        frame.to_csv(tmp_path / f"{name}.csv", index=False)
    return tmp_path


def _samples(n=3, **extra):
    frame = pd.DataFrame({"ts": [f"2026-11-09T00:0{i}:00Z" for i in range(n)], "node": "n1", "gpu_uuid": "GPU-a",
                          "namespace": "ns", "pod": "p", "gpu_util": 0.5})
    return frame.assign(**extra)


@pytest.mark.parametrize(("frames", "message"), [
    ({"samples": _samples().drop(columns="ts")}, "samples.csv: missing required column(s) 'ts'"),
    ({"samples": _samples().assign(fb_used_mib=1)}, "unknown column(s) 'fb_used_mib'"),
    ({"samples": _samples().assign(ts=["2026-11-09T00:00:00Z", "yesterday", "2026-11-09T00:02:00Z"])},
     "samples.csv: column 'ts', row 2: bad timestamp 'yesterday'"),
    ({"samples": _samples().assign(ts=[1794182400000, 1794182460000, 1794182520000])},
     "column 'ts', row 1: bad timestamp"),
    ({"samples": _samples().assign(gpu_util=["0.5", "0.5", "busy"])}, "column 'gpu_util', row 3: 'busy' is not a number"),
    ({"samples": _samples().assign(node=["n1", None, "n1"])}, "column 'node', row 2: required value is empty"),
    ({"pods": pd.DataFrame({"namespace": ["a"], "pod": ["p"], "gpu_count": [-1]})},
     "pods.csv: column 'gpu_count', row 1: negative value"),
    ({"devices": pd.DataFrame({"node": ["n"], "gpu_uuid": ["G"], "gpu_model": ["m"], "gpu_index": [1.5]})},
     "column 'gpu_index', row 1: 1.5 is not a whole number"),
    ({"prices": pd.DataFrame({"gpu_model": ["m"], "usd_per_gpu_hour": [-2.0]})}, "negative value"),
    ({"pods": pd.DataFrame({"namespace": ["a"], "pod": ["p"], "gpu_count": [1], "start_ts": ["2026-11-10T00:00:00Z"],
                            "end_ts": ["2026-11-09T00:00:00Z"]})}, "column 'end_ts', row 1: ends before start_ts"),
])
def test_bad_input_is_a_clear_error_and_nothing_is_loaded(tmp_path, frames, message):
    con = store.connect(None)
    store.load_bundle(con, _bundle(tmp_path / "good", samples=_samples(5)))
    before = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    # a good prices file rides along with the bad one: it must not be half-loaded either
    good_prices = {"prices": pd.DataFrame({"gpu_model": ["x"], "usd_per_gpu_hour": [1.0]})}
    bad = _bundle(tmp_path / "bad", **{**good_prices, **frames})
    with pytest.raises(store.BundleError) as info:
        store.load_bundle(con, bad)
    assert message in str(info.value)
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == before
    if "prices" not in frames:
        assert con.execute("SELECT count(*) FROM prices").fetchone()[0] == 0


def test_bad_row_in_a_later_batch_rolls_back_everything(tmp_path, monkeypatch):
    from gpuwatch.store import bundle

    monkeypatch.setattr(bundle, "BATCH_ROWS", 2)  # several batches from one small file
    con = store.connect(None)
    frame = _samples(5).assign(gpu_util=["0.1", "0.2", "0.3", "0.4", "oops"])
    with pytest.raises(store.BundleError, match="row 5"):
        store.load_bundle(con, _bundle(tmp_path, samples=frame))
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM ingest_log").fetchone()[0] == 0


def test_empty_or_missing_directory_is_an_error(tmp_path):
    con = store.connect(None)
    with pytest.raises(store.BundleError, match="no bundle files"):
        store.load_bundle(con, tmp_path)
    with pytest.raises(store.BundleError, match="not a bundle directory"):
        store.load_bundle(con, tmp_path / "nope")


def test_devices_and_pods_without_samples_still_give_allocation_chargeback(tmp_path):
    for name in ("devices", "pods", "prices"):
        shutil.copy(SAMPLE_DATA / f"{name}.csv", tmp_path / f"{name}.csv")
    con = store.connect(None)
    counts = store.load_bundle(con, tmp_path)
    assert counts["samples"] == 0 and counts["pods"] > 0
    p = params(*window(store.data_range(con)[1]))
    charge = analyses.run(con, "chargeback", **p)
    teams = charge[charge["kind"] == "team"]
    assert teams["cost_usd"].sum() > 0
    assert (teams["unobserved_usd"] == teams["cost_usd"]).all()  # no samples: all allocated time unobserved
    assert round(charge["cost_usd"].sum(), 2) == charge["fleet_cost_usd"].iloc[0]
    assert len(analyses.run(con, "idle_hoarding", **p)) == 0


def test_samples_without_sm_active_give_idle_findings_and_unknown_effective(tmp_path):
    samples = pd.read_parquet(SAMPLE_DATA / "samples.parquet").drop(
        columns=["sm_active", "sm_occupancy", "tensor_active", "dram_active"])
    samples.to_parquet(tmp_path / "samples.parquet")
    con = store.connect(None)
    store.load_bundle(con, tmp_path)
    p = params(*window(store.data_range(con)[1]))
    idle = analyses.run(con, "idle_hoarding", **p)
    assert idle["hoarder"].sum() > 0
    util = analyses.run(con, "utilization", **p)
    assert util["mean_sm_active"].isna().all() and util["mean_effective"].isna().all()
    false = analyses.run(con, "false_utilization", **p)
    assert not false["effective_known"].any() and not false["offender"].any()


def test_csv_and_parquet_bundles_load_the_same(tmp_path):
    frame = pd.read_parquet(SAMPLE_DATA / "samples.parquet").head(5000)
    frame.to_parquet(tmp_path / "p.parquet")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    frame.to_parquet(tmp_path / "a" / "samples.parquet")
    csv = frame.assign(ts=frame["ts"].dt.strftime("%Y-%m-%dT%H:%M:%SZ"))
    csv.to_csv(tmp_path / "b" / "samples.csv", index=False)
    tables = []
    for sub in ("a", "b"):
        con = store.connect(None)
        store.load_bundle(con, tmp_path / sub)
        tables.append(con.execute("SELECT * EXCLUDE (container) FROM stg_samples ORDER BY pod, device_key, ts").df())
    pd.testing.assert_frame_equal(tables[0], tables[1], check_dtype=False)


def test_ingest_command_is_idempotent(tmp_path, capsys):
    db = tmp_path / "g.duckdb"
    assert main(["ingest", "--from", str(SAMPLE_DATA), "--db", str(db)]) == 0
    assert main(["ingest", "--from", str(SAMPLE_DATA), "--db", str(db)]) == 0
    con = store.connect(str(db), read_only=True)
    rows = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    expected = len(pd.read_parquet(SAMPLE_DATA / "samples.parquet", columns=["ts"]))
    assert rows == expected
    assert con.execute("SELECT count(*) FROM pods").fetchone()[0] == len(pd.read_csv(SAMPLE_DATA / "pods.csv"))
    assert "samples 1,118,880" in capsys.readouterr().out


def test_ingest_command_reports_bad_bundle(tmp_path, capsys):
    bad = _bundle(tmp_path / "bad", samples=_samples().drop(columns="node"))
    assert main(["ingest", "--from", str(bad), "--db", str(tmp_path / "g.duckdb")]) == 1
    assert "missing required column(s) 'node'" in capsys.readouterr().err


def test_parquet_bad_value_names_file_column_and_row(tmp_path):
    frame = pd.read_parquet(SAMPLE_DATA / "samples.parquet").head(10)
    frame.loc[6, "node"] = None
    frame.to_parquet(tmp_path / "samples.parquet")
    con = store.connect(None)
    with pytest.raises(store.BundleError, match=r"samples.parquet: column 'node', row 7: required value is empty"):
        store.load_bundle(con, tmp_path)
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0


def test_linked_parquet_stages_the_same_as_a_copy(tmp_path):
    tables = []
    for link in (False, True):
        con = store.connect(None)
        counts = (store.link_bundle if link else store.load_bundle)(con, SAMPLE_DATA)
        assert counts["samples"] == 1_118_880
        tables.append(con.execute("SELECT * FROM stg_samples ORDER BY pod, device_key, ts").df())
    pd.testing.assert_frame_equal(tables[0], tables[1])
    with pytest.raises(store.BundleError, match="linked"):  # a linked store is not copied into
        store.load_bundle(con, SAMPLE_DATA)


def test_a_store_linked_before_samples_became_keys_and_readings_stays_linked(tmp_path):
    """A linked store written before the split held ``samples`` as a view over the Parquet: its first
    writable open keeps the link (sample_readings a view over it) and stages the same rows."""
    db = tmp_path / "linked.duckdb"
    con = store.connect(str(db))
    store.link_bundle(con, SAMPLE_DATA)
    staged = con.execute("SELECT * FROM stg_samples ORDER BY pod, device_key, ts").df()
    con.execute("DROP VIEW samples; DROP VIEW sample_readings; DROP TABLE sample_keys")
    con.execute("ALTER VIEW linked_samples RENAME TO samples")
    con.execute("UPDATE store_meta SET value = 'an older gpuwatch' WHERE key = 'staging'")
    con.close()
    con = store.connect(str(db))
    views = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
    assert {"samples", "sample_readings", "linked_samples"} <= views
    pd.testing.assert_frame_equal(con.execute("SELECT * FROM stg_samples ORDER BY pod, device_key, ts").df(), staged)
    with pytest.raises(store.BundleError, match="linked"):
        store.load_bundle(con, SAMPLE_DATA)


@pytest.mark.parametrize(("ts", "row"), [
    (["2026-11-09T00:00:00Z", "9999-12-31T00:00:00Z", "2026-11-09T00:02:00Z"], 2),  # used to crash analyze
    (["2026-11-09T00:00:00Z", "2026-11-09T00:01:00Z", "2100-01-01T00:00:00Z"], 3),  # used to move the window
    (["1999-12-31T23:59:00Z", "2026-11-09T00:01:00Z", "2026-11-09T00:02:00Z"], 1),
    ([1794182400, 4102444800, 1794182520], 2),  # epoch seconds in 2100
    ([1794182400, 1794182460, 1794182], 3),  # epoch seconds in 1970 (a .prom-style unit slip)
])
@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_timestamps_outside_the_sane_range_are_refused_in_every_format(tmp_path, ts, row, fmt):
    """Regression: one far-off timestamp used to crash `analyze` or hijack the default window, and a
    2-row bundle spanning 2026->2100 deleted the store's samples in between."""
    con = store.connect(None)
    store.load_bundle(con, _bundle(tmp_path / "good", samples=_samples(5)))
    before = con.execute("SELECT count(*) FROM samples").fetchall()
    frame = _samples().assign(ts=ts)
    if fmt == "parquet" and isinstance(ts[0], str):
        frame["ts"] = pd.to_datetime(frame["ts"], utc=True, format="ISO8601", errors="coerce")
        if frame["ts"].isna().any():
            pytest.skip("pandas cannot hold year 9999 as a timestamp; the CSV case covers it")
    bad = tmp_path / "bad"
    bad.mkdir()
    frame.to_csv(bad / "samples.csv", index=False) if fmt == "csv" else frame.to_parquet(bad / "samples.parquet")
    with pytest.raises(store.BundleError, match=rf"column 'ts', row {row}: bad timestamp .*outside 2000-01-01"):
        store.load_bundle(con, bad)
    assert con.execute("SELECT count(*) FROM samples").fetchall() == before


def test_timestamps_outside_the_sane_range_are_refused_from_frames():
    con = store.connect(None)
    frame = _samples().assign(ts=pd.to_datetime(["2026-11-09T00:00:00", "2026-11-09T00:01:00", "2100-01-01T00:00:00"], utc=True))
    with pytest.raises(store.BundleError, match=r"column 'ts', row 3: bad timestamp .*outside"):
        store.load(con, {"samples": frame}, source="prometheus")


def test_float32_epoch_timestamps_are_refused(tmp_path):
    frame = _samples().assign(ts=pd.Series([1794182400, 1794182460, 1794182520], dtype="float32"))
    (tmp_path / "b").mkdir()
    frame.to_parquet(tmp_path / "b" / "samples.parquet")
    with pytest.raises(store.BundleError, match="column 'ts' holds float32 epoch seconds"):
        store.load_bundle(store.connect(None), tmp_path / "b")
    with pytest.raises(store.BundleError, match="column 'ts' holds float32 epoch seconds"):
        store.load(store.connect(None), {"samples": frame}, source="frames")


def test_a_truncated_csv_gz_names_the_file(tmp_path):
    import gzip

    whole = gzip.compress(_samples(200).to_csv(index=False).encode())
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "samples.csv.gz").write_bytes(whole[: len(whole) // 2])
    con = store.connect(None)
    with pytest.raises(store.BundleError, match=r"samples\.csv\.gz: not a readable CSV"):
        store.load_bundle(con, tmp_path / "b")
    assert con.execute("SELECT count(*) FROM samples").fetchall()[0][0] == 0


@pytest.mark.parametrize(("column", "value"), [("fb_total_bytes", "99999999999999999999999999"),
                                              ("gpu_index", "99999999999")])
def test_integer_overflow_is_a_clear_error(tmp_path, column, value):
    frame = pd.DataFrame({"node": ["n"], "gpu_uuid": ["G"], "gpu_model": ["m"], column: [value]})
    with pytest.raises(store.BundleError, match=rf"column '{column}', row 1: .* is out of range"):
        store.load_bundle(store.connect(None), _bundle(tmp_path / "b", devices=frame))


def test_analysis_output_is_deterministic(tmp_path):
    """Same input, byte-identical CSVs (two stores, two runs)."""
    outs = []
    for run in ("a", "b"):
        assert main(["analyze", "--db", str(tmp_path / f"{run}.db"), "--input", str(SAMPLE_DATA),
                     "--out", str(tmp_path / run)]) == 0
        outs.append({p.name: p.read_bytes() for p in sorted((tmp_path / run).glob("*.csv"))})
    assert outs[0] == outs[1] and len(outs[0]) == 17


def test_an_infinite_timestamp_in_parquet_is_refused(tmp_path):
    """Regression: Parquet (written by DuckDB) holds an infinite TIMESTAMPTZ; it has no epoch, so the
    range rule passed it and the row loaded with ts = infinity."""
    import duckdb

    con = store.connect(None)
    store.load_bundle(con, _bundle(tmp_path / "good", samples=_samples(5)))
    before = con.execute("SELECT count(*) FROM samples").fetchall()
    bad = tmp_path / "bad"
    bad.mkdir()
    _samples().assign(ts=lambda f: pd.to_datetime(f["ts"], utc=True)).to_parquet(tmp_path / "plain.parquet")
    writer = duckdb.connect()
    writer.execute(f"COPY (SELECT * REPLACE (CASE WHEN ts = (SELECT max(ts) FROM '{tmp_path / 'plain.parquet'}') "
                   f"THEN 'infinity'::TIMESTAMPTZ ELSE ts END AS ts) FROM '{tmp_path / 'plain.parquet'}') "
                   f"TO '{bad / 'samples.parquet'}'")
    with pytest.raises(store.BundleError, match=r"samples.parquet: column 'ts', row 3: bad timestamp"):
        store.load_bundle(con, bad)
    assert con.execute("SELECT count(*) FROM samples").fetchall() == before
