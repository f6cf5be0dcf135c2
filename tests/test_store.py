"""The store's staging rules, on a real DuckDB: each rule gets a small hand-written bundle.

Checks: duplicates and out-of-order timestamps, NaN/negative readings -> NULL, ratios never rescaled
from values (a percent in a ratio column is refused), ratios slightly > 1 clamped and flagged, reported/effective derivation
(effective unknown stays NULL, never 0), the series step, GPU share and price per sample (MIG by
slices / 7 or a profile price row, time-sliced pods by gpu_count), idempotent re-loads.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.store import restage

T0 = pd.Timestamp("2026-11-09T00:00:00")
H100 = "NVIDIA H100 80GB HBM3"


def _samples(rows: list[dict]) -> pd.DataFrame:
    base = {"node": "n1", "gpu_uuid": "GPU-a", "namespace": "ns", "pod": "p"}
    return pd.DataFrame([{**base, **r} for r in rows])


def _stg(con, order: str = "ts") -> pd.DataFrame:
    return con.execute(f"SELECT * FROM stg_samples ORDER BY {order}").df()


@pytest.fixture
def con():
    connection = store.connect(None)
    yield connection
    connection.close()


def test_duplicates_collapse_and_out_of_order_rows_sort(con):
    rows = [{"ts": T0 + pd.Timedelta(seconds=s), "gpu_util": u} for s, u in ((120, 0.3), (0, 0.1), (60, 0.2), (60, 0.2))]
    store.load(con, {"samples": _samples(rows)}, source="test")
    stg = _stg(con)
    assert list(stg["gpu_util"]) == [0.1, 0.2, 0.3]
    assert list(stg["dt_seconds"].fillna(-1)) == [-1, 60, 60]
    assert set(stg["step_seconds"]) == {60}


@pytest.mark.parametrize("pair", ["series", "outside a series", "with and without a reading"])
def test_a_full_refresh_merges_every_kind_of_duplicate_and_only_its_node(con, pair):
    """The full staging stages without the merge, finds the doubled (stream, ts) in what it staged and
    stages that node again with it; other nodes are staged once, as they were."""
    t = [T0 + pd.Timedelta(seconds=s) for s in (0, 60, 120)]
    twins = {"series": [{"ts": t[1], "gpu_util": 0.2, "sm_active": 0.1}, {"ts": t[1], "gpu_util": 0.4}],
             "outside a series": [{"ts": t[1], "pod": None, "namespace": None, "gpu_util": 0.2},
                                  {"ts": t[1], "pod": None, "namespace": None, "gpu_util": 0.4}],
             "with and without a reading": [{"ts": t[1], "fb_used_bytes": 5.0}, {"ts": t[1], "gpu_util": 0.4}]}[pair]
    rows = [{"ts": t[0], "gpu_util": 0.1}, *twins, {"ts": t[2], "gpu_util": 0.3},
            *({"node": "n2", "gpu_uuid": "GPU-b", "ts": ts, "gpu_util": 0.5} for ts in t)]  # n2's own GPU
    store.load(con, {"samples": _samples(rows)}, source="test")
    stg = _stg(con, "node, ts, pod NULLS LAST")
    doubled = con.execute("SELECT count(*) FROM (SELECT stream_id, ts FROM stg_sample_rows GROUP BY ALL "
                          "HAVING count(*) > 1)").fetchone()[0]
    assert doubled == 0 and len(stg[stg["node"] == "n2"]) == 3
    merged = stg[(stg["node"] == "n1") & (stg["ts"] == t[1])].iloc[-1]
    if pair == "with and without a reading":  # a known value wins over NULL
        assert merged["gpu_util"] == 0.4 and merged["fb_used_bytes"] == 5.0 and bool(merged["in_series"])
        assert not merged["conflicted"]
    else:  # 0.2 and 0.4: a conflict is unknown, never the max (docs/architecture.md#billing)
        assert pd.isna(merged["gpu_util"]) and bool(merged["conflicted"]) and not bool(merged["in_series"])
    if pair == "series":  # the unknown sample leaves the series: t0 and t2 are 120 s apart
        assert merged["sm_active"] == 0.1 and list(stg[stg["node"] == "n1"]["dt_seconds"].fillna(-1)) == [-1, -1, 120]


def test_a_sample_sent_with_several_containers_shows_the_greatest_known_one(con, monkeypatch):
    """Rows of one (stream, ts) under several raw keys (containers "a", " b ", none): the merged sample
    shows the greatest known container, trimmed (a staged row keeps it as its raw key), whether the full
    staging or a load's re-staging merged them."""
    t = [T0 + pd.Timedelta(seconds=s) for s in (0, 60, 120)]
    rows = [{"ts": t[0], "gpu_util": 0.1, "container": "a"}, {"ts": t[1], "gpu_util": 0.2, "container": "a"},
            {"ts": t[1], "gpu_util": 0.2, "container": " b "}, {"ts": t[1], "gpu_util": 0.2, "container": None},
            {"ts": t[2], "gpu_util": 0.3, "container": None}]
    store.load(con, {"samples": _samples(rows)}, source="whole")

    def containers() -> list:
        return [None if pd.isna(c) else c for c in _stg(con)["container"]]
    assert containers() == ["a", "b", None]
    monkeypatch.setattr(restage, "FULL_SHARE", float("inf"))
    store.load(con, {"samples": _samples(rows[1:4])}, source="the middle again")  # re-staged incrementally
    assert containers() == ["a", "b", None]


def test_nan_inf_and_negative_readings_become_null_not_zero(con):
    rows = [{"ts": T0, "gpu_util": float("nan"), "sm_active": -0.2, "fb_used_bytes": float("inf"),
             "power_watts": -1.0, "nvlink_tx_bytes_per_second": -5e9}]  # negative rate: a counter reset
    store.load(con, {"samples": _samples(rows)}, source="test")
    row = _stg(con).iloc[0]
    for column in ("gpu_util", "sm_active", "fb_used_bytes", "power_watts", "nvlink_tx_bytes_per_second", "reported"):
        assert pd.isna(row[column]), column


def test_a_saturated_gpu_beside_idle_ones_stays_saturated(con):
    """Regression: staging used to guess percent per node (whole numbers 0/1 -> /100), so a GPU at
    exactly 1.0 on a node whose other GPUs read 0 became 0.01 and was staged idle."""
    def rows(node, gpu, values):
        return [{"ts": T0 + pd.Timedelta(minutes=i), "gpu_util": v, "node": node, "gpu_uuid": gpu, "pod": gpu}
                for i, v in enumerate(values)]

    samples = (rows("n1", "GPU-busy", (1.0, 1.0, 1.0)) + rows("n1", "GPU-idle", (0, 0, 0))
               + rows("n2", "GPU-b", (0, 1, 0)) + rows("n3", "GPU-c", (0.0, 0.45, 1.02)))
    store.load(con, {"samples": _samples(samples)}, source="test")
    stg = _stg(con, "gpu_uuid, ts").groupby("gpu_uuid")["gpu_util"].apply(list)
    assert stg["GPU-busy"] == [1.0, 1.0, 1.0]
    assert stg["GPU-idle"] == [0.0, 0.0, 0.0]
    assert stg["GPU-b"] == [0.0, 1.0, 0.0]
    assert stg["GPU-c"] == pytest.approx([0.0, 0.45, 1.0])  # one stray 1.02 is clamped, not a unit


@pytest.mark.parametrize("column,value", [("gpu_util", 45.0), ("tensor_active", 1.2), ("sm_active", 30.0)])
def test_a_percent_in_a_ratio_column_is_refused(con, column, value):
    samples = _samples([{"ts": T0, column: 0.5}, {"ts": T0 + pd.Timedelta(minutes=1), column: value}])
    with pytest.raises(store.BundleError, match=rf"column '{column}', row 2: {value!r} is above 1"):
        store.load(con, {"samples": samples}, source="test")
    assert con.execute("SELECT count(*) FROM samples").fetchall()[0][0] == 0


def test_ratios_above_one_are_clamped_and_flagged(con):
    rows = [{"ts": T0, "gr_engine_active": 0.9, "sm_active": 1.3, "mig_gi_id": 1},
            {"ts": T0 + pd.Timedelta(minutes=1), "gr_engine_active": 0.9, "sm_active": 0.8, "mig_gi_id": 1}]
    store.load(con, {"samples": _samples(rows)}, source="test")
    stg = _stg(con)
    assert list(stg["sm_active"]) == [1.0, 0.8]
    assert list(stg["ratio_clamped"]) == [True, False]


def test_reported_falls_back_to_gr_engine_and_effective_stays_unknown(con):
    rows = [{"ts": T0, "gpu_util": None, "gr_engine_active": 0.7, "mig_gi_id": 3},
            {"ts": T0 + pd.Timedelta(minutes=1), "gpu_util": 0.2, "gr_engine_active": 0.9}]
    store.load(con, {"samples": _samples(rows)}, source="test")
    stg = _stg(con)
    assert list(stg["reported"]) == [0.7, 0.2]
    assert stg["effective"].isna().all()


def test_step_is_the_median_interval_of_each_series(con):
    seconds = (0, 30, 60, 90, 400, 430)  # one long gap does not move the median
    rows = [{"ts": T0 + pd.Timedelta(seconds=s), "gpu_util": 0.5} for s in seconds]
    store.load(con, {"samples": _samples(rows)}, source="test")
    assert set(_stg(con)["step_seconds"]) == {30}


def test_share_and_price_per_sample(con):
    devices = pd.DataFrame([
        {"node": "n1", "gpu_uuid": "GPU-a", "gpu_model": H100},
        {"node": "n1", "gpu_uuid": "GPU-m", "gpu_model": H100},
        {"node": "n1", "gpu_uuid": "GPU-m", "gpu_model": H100, "mig_gi_id": 1, "mig_profile": "3g.40gb", "mig_profile_id": 9},
        {"node": "n1", "gpu_uuid": "GPU-m", "gpu_model": H100, "mig_gi_id": 7, "mig_profile": "1g.10gb", "mig_profile_id": 19},
    ])
    prices = pd.DataFrame({"gpu_model": [H100, f"{H100}/1g.10gb"], "usd_per_gpu_hour": [7.0, 0.5]})
    pods = pd.DataFrame([
        {"namespace": "ns", "pod": "shared", "node": "n1", "gpu_resource": "nvidia.com/gpu.shared", "gpu_count": 0.25, "device_ids": "GPU-a"},
        {"namespace": "ns", "pod": "mig3", "node": "n1", "gpu_resource": "nvidia.com/mig-3g.40gb", "gpu_count": 1, "device_ids": "MIG-x"},
        {"namespace": "ns", "pod": "mig1", "node": "n1", "gpu_resource": "nvidia.com/mig-1g.10gb", "gpu_count": 1, "device_ids": "MIG-y"},
    ])
    samples = _samples([{"ts": T0, "pod": "shared", "gpu_util": 0.5},
                        {"ts": T0, "pod": "mig3", "gpu_uuid": "GPU-m", "mig_gi_id": 1, "gr_engine_active": 0.5},
                        {"ts": T0, "pod": "mig1", "gpu_uuid": "GPU-m", "mig_gi_id": 7, "gr_engine_active": 0.5},
                        {"ts": T0, "pod": None, "namespace": None, "gpu_uuid": "GPU-m", "mig_gi_id": 1}])
    store.load(con, {"devices": devices, "prices": prices, "pods": pods, "samples": samples}, source="test")
    stg = _stg(con, "pod NULLS LAST")
    by_pod = stg.set_index(stg["pod"].fillna("(none)"))
    assert by_pod.loc["shared", ["gpu_share", "usd_per_hour"]].tolist() == [0.25, 1.75]
    assert by_pod.loc["mig3", "gpu_share"] == pytest.approx(3 / 7)
    assert by_pod.loc["mig3", "usd_per_hour"] == pytest.approx(3.0)
    assert by_pod.loc["mig1", "usd_per_hour"] == pytest.approx(0.5)  # the profile's own price row wins
    assert by_pod.loc["(none)", "usd_per_hour"] == pytest.approx(3.0)  # unallocated: the device's price


def test_reload_of_a_window_replaces_it(con):
    rows = [{"ts": T0 + pd.Timedelta(minutes=i), "gpu_util": 0.5} for i in range(10)]
    store.load(con, {"samples": _samples(rows)}, source="first")
    again = [{"ts": T0 + pd.Timedelta(minutes=i), "gpu_util": 0.9} for i in range(5)]
    counts = store.load(con, {"samples": _samples(again)}, source="second")
    assert counts["samples"] == 5
    stg = _stg(con)
    assert len(stg) == 10 and list(stg["gpu_util"]) == [0.9] * 5 + [0.5] * 5
    log = con.execute("SELECT source, samples FROM ingest_log ORDER BY loaded_at").fetchall()
    assert log == [("first", 10), ("second", 5)]


def test_upsert_devices_pods_prices_by_key(con):
    prices = pd.DataFrame({"gpu_model": [H100], "usd_per_gpu_hour": [4.0]})
    store.load(con, {"prices": prices}, source="a")
    store.load(con, {"prices": prices.assign(usd_per_gpu_hour=5.0)}, source="b")
    assert con.execute("SELECT usd_per_gpu_hour FROM stg_prices").fetchall() == [(5.0,)]


def test_team_label_else_namespace(con):
    pods = pd.DataFrame([{"namespace": "ns1", "pod": "a", "team": "nlp", "gpu_count": 1},
                         {"namespace": "ns2", "pod": "b", "team": " ", "gpu_count": 1}])
    store.load(con, {"pods": pods}, source="t")
    assert con.execute("SELECT pod, team FROM stg_pods ORDER BY pod").fetchall() == [("a", "nlp"), ("b", "ns2")]


def test_has_table_and_data_range(con):
    assert store.has_table(con, "stg_samples") and store.has_table(con, "reclaim_audit")
    assert not store.has_table(con, "nope")
    assert store.data_range(con) == (None, None)
    store.load(con, {"samples": _samples([{"ts": T0, "gpu_util": 0.1}])}, source="t")
    assert store.data_range(con)[1] == T0.to_pydatetime()


def test_read_only_connection_sees_the_data(tmp_path):
    path = tmp_path / "g.duckdb"
    con = store.connect(str(path))
    store.load(con, {"samples": _samples([{"ts": T0, "gpu_util": 0.1}])}, source="t")
    con.close()
    ro = store.connect(str(path), read_only=True)
    assert ro.execute("SELECT count(*) FROM stg_samples").fetchone()[0] == 1
    assert math.isclose(ro.execute("SELECT reported FROM stg_samples").fetchone()[0], 0.1)


def test_a_writable_open_of_a_store_this_gpuwatch_made_writes_nothing(tmp_path):
    import duckdb

    db, wal = tmp_path / "s.duckdb", tmp_path / "s.duckdb.wal"
    store.connect(str(db)).close()
    was = db.stat().st_size, db.stat().st_mtime_ns
    con = store.connect(str(db))  # the service opens its store every few minutes: no catalog rewrite
    assert not wal.exists()
    con.close()
    assert (db.stat().st_size, db.stat().st_mtime_ns) == was
    # a store whose reference tables another gpuwatch wrote: made again, with this gpuwatch's facts
    con = duckdb.connect(str(db))
    con.execute("UPDATE ref_links SET link_rank = 99 WHERE link = 'NV'")
    con.execute("DELETE FROM store_meta WHERE key = 'reference'")
    con.close()
    con = store.connect(str(db))
    assert con.execute("SELECT link_rank FROM ref_links WHERE link = 'NV'").fetchone() == (0,)
    assert con.execute("SELECT value FROM store_meta WHERE key = 'reference'").fetchone() == (
        store.reference_fingerprint(),)
    con.close()


def test_stream_ids_come_from_keys_and_names_that_trim_alike_share_one(con):
    rows = [{"ts": T0, "namespace": "ns", "gpu_util": 0.1}, {"ts": T0 + pd.Timedelta(minutes=1), "namespace": " ns ", "gpu_util": 0.2},
            {"ts": T0, "gpu_uuid": "GPU-b", "pod": "q", "gpu_util": 0.3}, {"ts": T0, "gpu_uuid": "GPU-c", "pod": None}]
    store.load(con, {"samples": _samples(rows)}, source="test")
    streams = con.execute("SELECT gpu_uuid, namespace, pod, stream_id FROM stg_streams ORDER BY gpu_uuid").fetchall()
    assert [s[:3] for s in streams] == [("GPU-a", "ns", "p"), ("GPU-b", "ns", "q"), ("GPU-c", "ns", None)]
    ids = {s[0]: s[3] for s in streams}
    assert len(set(ids.values())) == 3
    # an id depends on the key alone (not on which streams were loaded before): a load hour by hour
    # stages what one load stages
    other = store.connect(None)
    store.load(other, {"samples": _samples(rows[2:3])}, source="test")
    assert other.execute("SELECT stream_id FROM stg_streams").fetchall() == [(ids["GPU-b"],)]
    aliases = con.execute("SELECT raw_namespace, stream_id FROM stg_stream_aliases WHERE gpu_uuid = 'GPU-a' "
                          "ORDER BY raw_namespace").fetchall()
    assert aliases == [(" ns ", ids["GPU-a"]), ("ns", ids["GPU-a"])]
    # the two spellings are one series: the second sample follows the first
    stg = _stg(con, "gpu_uuid, ts")
    assert list(stg["dt_seconds"].fillna(-1))[:2] == [-1, 60] and stg["in_series"].tolist() == [True, True, True, False]


def test_a_store_from_0_1_0_is_restaged_when_opened(tmp_path):
    path = tmp_path / "old.duckdb"
    con = store.connect(str(path))
    store.load(con, {"samples": _samples([{"ts": T0, "gpu_util": 0.1}])}, source="t")
    # 0.1.0 kept stg_samples as a table and had none of the stream tables
    con.execute("DROP VIEW stg_samples")
    con.execute("DROP VIEW stg_sample_rows")
    con.execute("DROP TABLE stg_sample_rows_stored")
    con.execute("DROP TABLE stg_streams")
    con.execute("DROP TABLE stg_stream_aliases")
    con.execute("CREATE TABLE stg_samples AS SELECT 1 AS stale")
    con.close()
    with pytest.raises(store.BundleError, match="open it once for writing"):
        store.connect(str(path), read_only=True)  # the app: a clear error, not a missing-table one
    again = store.connect(str(path))
    assert again.execute("SELECT table_type FROM information_schema.tables WHERE table_name = 'stg_samples'"
                         ).fetchone()[0] == "VIEW"
    assert again.execute("SELECT pod, reported FROM stg_samples").fetchall() == [("p", 0.1)]


def test_one_device_far_ahead_does_not_move_the_end_of_the_data(con):
    """Regression: the default window ended at max(ts), so one device a day ahead (clock skew, a
    unit slip that still passes the range check) moved "the last 7 days" past everyone's data. The
    guard is the analysis' own clock (issue 31, item 2): a sample dated after it is left out and
    reported, and no share of the devices decides the end."""
    rows = [{"ts": T0 + pd.Timedelta(minutes=m), "gpu_uuid": f"GPU-{g}", "gpu_util": 0.5}
            for g in range(12) for m in range(3)]
    rows.append({"ts": T0 + pd.Timedelta(hours=20), "gpu_uuid": "GPU-0", "gpu_util": 0.5})
    store.load(con, {"samples": _samples(rows)}, source="test")
    now = (T0 + pd.Timedelta(minutes=2, seconds=30)).to_pydatetime()
    first, last = store.data_range(con, now=now)
    assert first == T0
    assert last == T0 + pd.Timedelta(minutes=2)
    assert store.ahead_of_clock(con, now=now) == (1, 1, (T0 + pd.Timedelta(hours=20)).to_pydatetime())


def test_a_load_replaces_only_the_series_it_carries(con):
    """Regression: a load deleted every sample between its first and last timestamp, whatever the
    node, so ingesting node B's scrape removed node A's samples at that instant."""
    def rows(node, gpu, minutes, util):
        return [{"ts": T0 + pd.Timedelta(minutes=m), "node": node, "gpu_uuid": gpu, "gpu_util": util} for m in minutes]

    store.load(con, {"samples": _samples(rows("a", "GPU-a", range(10), 0.1) + rows("b", "GPU-b", range(10), 0.2))},
               source="first")
    store.load(con, {"samples": _samples(rows("b", "GPU-b", range(3, 6), 0.9))}, source="node b again")
    kept = con.execute("SELECT node, count(*), sum(gpu_util) FROM samples GROUP BY node ORDER BY node").fetchall()
    assert kept[0] == ("a", 10, pytest.approx(1.0))  # node a untouched
    assert kept[1] == ("b", 10, pytest.approx(7 * 0.2 + 3 * 0.9))  # b's minutes 3-5 replaced, the rest kept
    store.load(con, {"samples": _samples(rows("b", "GPU-b", range(3, 6), 0.9))}, source="re-sent")
    assert con.execute("SELECT count(*) FROM samples").fetchall()[0][0] == 20  # a re-sent load is idempotent


def test_an_unknown_bundle_table_is_an_error(con):
    with pytest.raises(store.BundleError, match="unknown bundle file 'sample'"):
        store.load(con, {"sample": _samples([{"ts": T0}])}, source="test")


def test_the_small_staged_tables_are_their_definitions_after_every_kind_of_load(tmp_path):
    from tests import app_support

    con = store.connect(str(app_support.load_sample(tmp_path / "s.duckdb")))

    def stale() -> list[str]:
        return [name for name in store.materialised()
                if con.execute(f"SELECT count(*) FROM (FROM {name} EXCEPT ALL FROM {name}_def "
                               f"UNION ALL (FROM {name}_def EXCEPT ALL FROM {name}))").fetchone()[0]]

    assert len(store.materialised()) == 11
    assert stale() == [] and con.execute("SELECT count(*) FROM stg_pods").fetchone()[0] > 0
    prices = con.execute("SELECT gpu_model, usd_per_gpu_hour * 2 AS usd_per_gpu_hour FROM prices").df()
    store.load(con, {"prices": prices}, source="test: prices doubled")  # a load without samples
    assert stale() == []
    pods = con.execute("SELECT * EXCLUDE (end_ts), NULL::TIMESTAMP AS end_ts FROM pods LIMIT 3").df()
    store.load(con, {"pods": pods}, source="test: three pods run again")
    assert stale() == []
    con.close()
