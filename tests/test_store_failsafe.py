"""The store's fail-safe edges: the end of the data is the bulk's (not one device's, not held back
by retired devices), SM_ACTIVE above 1 only on MIG, NaN readings are unknown rather than errors,
and a bundle directory with a file that is not a bundle table is refused, store untouched.
"""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gpuwatch import store
from gpuwatch.store import bulk_end

T0 = pd.Timestamp("2026-11-09T00:00:00")
D0 = T0.to_pydatetime()


def _rows(gpu: str, minutes, *, node: str = "n1", **values) -> list[dict]:
    return [{"ts": T0 + pd.Timedelta(minutes=m), "node": node, "gpu_uuid": gpu, "gpu_util": 0.5, **values}
            for m in minutes]


@pytest.fixture
def con():
    connection = store.connect(None)
    yield connection
    connection.close()


def test_retired_devices_do_not_hold_the_end_of_the_data_back(con):
    """Regression: the end was the 90th percentile of the devices' last samples, so once most device
    keys ever seen were retired (node churn, a node-pool upgrade renames every node), the default
    window stopped where they did, days before the fleet's current data."""
    retired = [r for g in range(20) for r in _rows(f"GPU-old{g}", range(3), node=f"old{g // 8}")]
    current = [r for g in range(2) for r in _rows(f"GPU-new{g}", range(0, 3 * 24 * 60 + 1, 60), node="new")]
    store.load(con, {"samples": pd.DataFrame(retired + current)}, source="test")
    assert store.data_range(con) == (D0, D0 + timedelta(days=3))


def test_the_end_is_where_at_least_half_of_the_recently_active_devices_still_report():
    def device(first_h, last_h):
        return D0 + timedelta(hours=first_h), D0 + timedelta(hours=last_h)

    bulk = [device(0, 48)] * 5
    assert bulk_end([*bulk, device(0, 60)]) == D0 + timedelta(hours=48)  # one device 12 h ahead: ignored
    assert bulk_end([*bulk, device(0, 50), device(0, 50), device(0, 50)]) == D0 + timedelta(hours=48)
    # more than half stopped within the last day: the end is where they stopped, not the survivors'
    assert bulk_end([*bulk, *[device(0, 40)] * 6]) == D0 + timedelta(hours=40)
    assert bulk_end([device(0, 1)]) == D0 + timedelta(hours=1)


def test_sm_active_above_one_is_allowed_on_mig_only(con):
    whole = _rows("GPU-a", range(2), sm_active=1.2)
    with pytest.raises(store.BundleError, match=r"test:samples: column 'sm_active', row 1: 1\.2 is above 1"):
        store.load(con, {"samples": pd.DataFrame(whole)}, source="test")
    mig = _rows("GPU-a", range(2), sm_active=1.2, mig_gi_id=1)
    assert store.load(con, {"samples": pd.DataFrame(mig)}, source="test")["samples"] == 2
    staged = con.execute("SELECT sm_active, ratio_clamped FROM stg_samples ORDER BY ts").fetchall()
    assert staged == [(1.0, True), (1.0, True)]  # clamped and counted
    with pytest.raises(store.BundleError, match=r"column 'sm_active', row 1: 1\.6 is above 1"):
        store.load(con, {"samples": pd.DataFrame(_rows("GPU-b", range(1), sm_active=1.6, mig_gi_id=1))}, source="t")


def test_a_nan_reading_in_parquet_is_unknown_not_a_ratio_above_one(con, tmp_path):
    """Regression: DuckDB orders NaN above every number, so a NaN ratio was refused as 'above 1'."""
    table = pa.table({"ts": [D0, D0 + timedelta(minutes=1)], "node": ["n1", "n1"], "gpu_uuid": ["GPU-a", "GPU-a"],
                      "gpu_util": pa.array([float("nan")] * 2), "sm_active": pa.array([0.4, float("nan")])})
    pq.write_table(table, tmp_path / "samples.parquet")
    assert store.load_bundle(con, tmp_path)["samples"] == 2
    staged = con.execute("SELECT gpu_util, sm_active FROM stg_samples ORDER BY ts").fetchall()
    assert staged == [(None, 0.4), (None, None)]


def test_a_percent_in_a_bundle_csv_names_file_column_and_row(con, tmp_path):
    pd.DataFrame(_rows("GPU-a", range(3))).assign(gpu_util=[0.5, 1.0, 87.0]).to_csv(tmp_path / "samples.csv", index=False)
    with pytest.raises(store.BundleError, match=r"samples\.csv: column 'gpu_util', row 3: 87\.0 is above 1"):
        store.load_bundle(con, tmp_path)


def test_a_data_file_that_is_not_a_bundle_table_is_refused_and_nothing_loads(con, tmp_path):
    """Regression: a misnamed file (sample.csv) was skipped with a warning and the rest loaded."""
    pd.DataFrame(_rows("GPU-a", range(3))).to_csv(tmp_path / "sample.csv", index=False)
    pd.DataFrame({"gpu_model": ["H100"], "usd_per_gpu_hour": [2.0]}).to_csv(tmp_path / "prices.csv", index=False)
    pd.DataFrame({"x": [1]}).to_csv(tmp_path / "truth.csv", index=False)  # the simulator's, expected
    with pytest.raises(store.BundleError, match=r"not bundle files: sample\.csv \(bundle files: devices, samples"):
        store.load_bundle(con, tmp_path)
    assert con.execute("SELECT count(*) FROM prices").fetchall()[0][0] == 0
    (tmp_path / "sample.csv").rename(tmp_path / "samples.csv")
    assert store.load_bundle(con, tmp_path)["samples"] == 3


@pytest.mark.parametrize(("name", "table", "column"), [
    ("prices", {"gpu_model": ["A", "B"], "usd_per_gpu_hour": [2.0, float("nan")]}, "usd_per_gpu_hour"),
    ("pods", {"namespace": ["a", "a"], "pod": ["p", "q"], "gpu_count": [1.0, float("nan")]}, "gpu_count"),
])
def test_a_nan_price_or_gpu_count_in_parquet_is_refused(con, tmp_path, name, table, column):
    """Regression: DuckDB skipped the 'above the bound' check using the Parquet column's min/max
    statistics, which leave NaN out, so a NaN price beside a real one loaded (and cost NaN)."""
    pq.write_table(pa.table(table), tmp_path / f"{name}.parquet")
    with pytest.raises(store.BundleError, match=rf"{name}\.parquet: column '{column}', row 2: 'nan' is not a plausible"):
        store.load_bundle(con, tmp_path)
    assert con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0] == 0


def test_a_reader_refuses_a_store_staged_by_another_version(tmp_path):
    """The app, the report and the findings exporter open the store read-only and cannot re-stage it:
    a store staged from other SQL (an older or newer gpuwatch) is a one-line error, never a missing-macro
    traceback; the next writer (ingest, analyze) re-stages it."""
    from gpuwatch import store

    db = tmp_path / "g.duckdb"
    store.connect(str(db)).close()
    con = store.connect(str(db))
    con.execute("UPDATE store_meta SET value = 'older' WHERE key = 'staging'")
    con.close()
    with pytest.raises(store.BundleError, match="staged by another gpuwatch version; open it once for writing"):
        store.connect(str(db), read_only=True)
    store.connect(str(db)).close()  # a writer re-stages it
    store.connect(str(db), read_only=True).close()
