"""The hourly rollup (store/rollup.sql, store/rollup.py) gives, bit for bit, what a pass over the rows gives.

A simulated fleet (failures and topology planted) is loaded hour by hour, in order and shuffled with
hours sent again and a late hour changed, with the rollup brought up to date after every load as the
analyze step does; the stored hours must equal a rollup built once over the whole data, and the
analyses that read it (utilization, chargeback, idle_hoarding, false_utilization, rightsizing,
fleet_timeseries, orphaned_memory, topology_placement) must equal their row-by-row results:
with the rollup current, stale, made for other thresholds, on a window that does not end on the hour,
and read-only.
"""

from __future__ import annotations

import random
import shutil
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from gpuwatch import analyses, store
from gpuwatch.analyses import params as defaults
from gpuwatch.store import bundle as bundle_files
from gpuwatch.store import restage, rollup
from tests.support.bundles import by_hour, small_fleet, without_samples

READERS = (("utilization", {}), ("chargeback", {}), ("idle_hoarding", {}), ("false_utilization", {}),
           ("rightsizing", {}), ("fleet_timeseries", {"bucket_seconds": 3600}),
           ("fleet_timeseries", {"bucket_seconds": 86400}), ("fleet_timeseries", {"bucket_seconds": 900}),
           ("orphaned_memory", {}), ("topology_placement", {}))


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """Six hours of the 16-GPU fleet (seed 5): every reader still gives rows (orphaned memory, an unhealthy
    GPU, a stalled gang and misplaced jobs are planted in them), and the replays below still load one hour
    after another, shuffled, re-sent and changed late; each load costs about the same fixed time whatever
    its size, so the twelve hours of a half day doubled the replays' cost and proved nothing more."""
    return small_fleet(tmp_path_factory.mktemp("rollup") / "bundle", seed=5, days=0.25)


@pytest.fixture(scope="module")
def parts(bundle, tmp_path_factory) -> dict:
    samples = pd.read_parquet(bundle_files.find_files(bundle)["samples"])
    return {"static": without_samples(bundle, tmp_path_factory.mktemp("static")), "hours": by_hour(samples)}


@pytest.fixture(scope="module")
def whole(bundle, tmp_path_factory) -> Path:
    """The whole bundle in one load; the rollup built once, over every row."""
    db = tmp_path_factory.mktemp("whole") / "whole.duckdb"
    con = store.connect(str(db))
    store.load_bundle(con, bundle)
    rollup.update(con, **_thresholds(con))
    con.close()
    return db


def _copy(whole: Path, db: Path):
    """A writable copy of the whole store."""
    shutil.copy(whole, db)
    return store.connect(str(db))


def _assert_readers_row_by_row(con, params: dict) -> None:
    """Every reader of the rollup gives, with these params, its row-by-row answer exactly."""
    for name, extra in READERS:
        fresh = _row_by_row(con, name, {**params, **extra})
        assert not fresh.empty, name
        pd.testing.assert_frame_equal(_run(con, name, {**params, **extra}), fresh, check_exact=True,
                                      obj=f"{name} {extra} {params['start']}..{params['end']}")


def _params(con, **extra) -> dict:
    return {**defaults.params(*defaults.window(store.data_range(con)[1])), **extra}


def _thresholds(con, **overrides) -> dict:
    return {k: {**_params(con), **overrides}[k] for k in analyses.ROLLUP_THRESHOLDS}


def _row_by_row(con, name: str, params: dict) -> pd.DataFrame:
    """The analysis with the rollup out of the way (no stored hour is current)."""
    con.execute("BEGIN TRANSACTION")
    con.execute("DELETE FROM rollup_meta")
    try:
        return _run(con, name, params)
    finally:
        con.execute("ROLLBACK")


def _run(con, name: str, params: dict) -> pd.DataFrame:
    used = analyses.body_params(name)
    return con.execute(analyses.sql(name), {k: v for k, v in params.items() if k in used}).df()


def _stored_hours(con) -> pd.DataFrame:
    return con.execute("SELECT * FROM rollup_stream_hours ORDER BY stream_id, hour").df()


def _current(con, params: dict) -> bool:
    return con.execute("SELECT rollup_current($i, $m, $b)",
                       {"i": params["idle_below"], "m": params["false_reported_min"],
                        "b": params["false_effective_below"]}).fetchone()[0]


@pytest.fixture
def every_load_incremental(monkeypatch):
    monkeypatch.setattr(restage, "FULL_SHARE", float("inf"))


@pytest.mark.parametrize("case", ["in order", "shuffled, hours sent again, a late hour changed"])
def test_hour_by_hour_updates_give_the_rollup_of_all_rows(case, parts, whole, tmp_path, every_load_incremental):
    hours = parts["hours"]
    order = list(range(len(hours)))
    resend: list[int] = []
    if case != "in order":
        rng = random.Random(11)
        rng.shuffle(order)
        resend = rng.sample(range(len(hours)), 3)
    con = store.connect(str(tmp_path / "hours.duckdb"))
    store.load_bundle(con, parts["static"])
    recomputed = []
    for i in [*order, *resend]:
        store.load(con, {"samples": hours[i]}, source=f"hour {i}")
        recomputed.append(rollup.update(con, **_thresholds(con)))
    if case != "in order":  # an old hour arrives again with other readings, then as it was
        late = hours[2].assign(gpu_util=hours[2]["gpu_util"].fillna(0.5) * 0.5)
        store.load(con, {"samples": late}, source="late, changed")
        rollup.update(con, **_thresholds(con))
        changed = _stored_hours(con)
        store.load(con, {"samples": hours[2]}, source="late, as it was")
        assert rollup.update(con, **_thresholds(con)) == 1  # that hour's range alone
        assert not changed.equals(_stored_hours(con))
    assert set(recomputed[1:]) == {1}  # after the first, each load recomputes one merged range of hours
    reference = store.connect(str(whole), read_only=True)
    pd.testing.assert_frame_equal(_stored_hours(con), _stored_hours(reference), check_exact=True)
    for name, extra in READERS:
        pd.testing.assert_frame_equal(_run(con, name, _params(con, **extra)),
                                      _run(reference, name, _params(reference, **extra)), check_exact=True,
                                      obj=f"{name} {extra}")
    reference.close()
    con.close()


def test_readers_give_the_row_by_row_answer_current_or_not(whole, tmp_path):
    db = tmp_path / "copy.duckdb"
    con = _copy(whole, db)
    params = _params(con)
    assert _current(con, params)
    half_hour = {**params, "end": params["end"] - timedelta(minutes=30), "start": params["start"] + timedelta(minutes=15)}
    for window in (params, half_hour):
        _assert_readers_row_by_row(con, window)
    other = {**params, "idle_below": 0.2, "false_effective_below": 0.3}
    assert not _current(con, other)  # counted for other thresholds: the readers count the rows
    _assert_readers_row_by_row(con, other)
    con.close()


def test_a_load_without_samples_keeps_the_hours_and_the_readers_see_it(whole, parts, tmp_path):
    """New prices change every stream's cost, not one stored hour: the readers read rows until the next
    update (stale: a load came after it), which recomputes nothing, and then read the hours again."""
    db = tmp_path / "prices.duckdb"
    con = _copy(whole, db)
    before = _stored_hours(con)
    params = _params(con)
    cost = _run(con, "chargeback", params)
    prices = tmp_path / "prices.csv"
    models = con.execute("SELECT DISTINCT gpu_model FROM devices WHERE gpu_model IS NOT NULL").fetchall()
    prices.write_text("gpu_model,usd_per_gpu_hour\n" + "".join(f"{m},7.5\n" for (m,) in models))
    store.load(con, {}, source="prices", prices=[prices])
    assert not _current(con, params)
    stale = _run(con, "chargeback", params)
    assert not stale.equals(cost)
    assert rollup.update(con, **_thresholds(con)) == 0 and _current(con, params)
    pd.testing.assert_frame_equal(_stored_hours(con), before, check_exact=True)
    pd.testing.assert_frame_equal(_run(con, "chargeback", params), stale, check_exact=True)
    con.close()
    reader = store.connect(str(db), read_only=True)  # the app: reads what the analyze step kept
    pd.testing.assert_frame_equal(_run(reader, "chargeback", params), stale, check_exact=True)
    reader.close()


def test_a_store_staged_again_rebuilds_the_rollup(whole, tmp_path):
    db = tmp_path / "salted.duckdb"
    con = _copy(whole, db)
    params = _params(con)
    con.execute("INSERT OR REPLACE INTO store_meta VALUES ('stream_salt', '5')")
    rows = con.execute("SELECT count(*) FROM stg_sample_rows").fetchone()[0]
    store.refresh(con)  # every stream id changes with the salt
    # the rows' ids (from their raw keys' aliases) and the streams' agree under the new salt
    assert con.execute("SELECT count(*) FROM stg_sample_rows SEMI JOIN stg_stream_aliases USING (stream_id) "
                       "SEMI JOIN stg_streams USING (stream_id)").fetchone()[0] == rows
    assert not _current(con, params)
    rollup.update(con, **_thresholds(con))
    assert _current(con, params)
    staged = {s for (s,) in con.execute("SELECT DISTINCT stream_id FROM stg_sample_rows").fetchall()}
    assert set(_stored_hours(con)["stream_id"]) == staged  # every hour stored again under the new ids
    _assert_readers_row_by_row(con, params)
    con.close()


def test_a_store_from_another_version_gets_a_rollup_of_this_shape(whole, tmp_path):
    """A store whose rollup was made by other SQL (fewer columns, another staging fingerprint) is re-staged
    on its first writable open, its rollup made again in this version's shape, then brought up to date."""
    db = tmp_path / "old.duckdb"
    con = _copy(whole, db)
    columns = [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'rollup_stream_hours'").fetchall()]
    con.execute("ALTER TABLE rollup_stream_hours DROP COLUMN series_last_ts")
    con.execute("UPDATE store_meta SET value = 'an older gpuwatch' WHERE key = 'staging'")
    con.close()
    con = store.connect(str(db))
    assert [c for (c,) in con.execute("SELECT column_name FROM duckdb_columns() "
                                      "WHERE table_name = 'rollup_stream_hours'").fetchall()] == columns
    params = _params(con)
    assert rollup.update(con, **_thresholds(con)) == 1 and _current(con, params)
    reference = store.connect(str(whole), read_only=True)
    pd.testing.assert_frame_equal(_stored_hours(con), _stored_hours(reference), check_exact=True)
    reference.close()
    con.close()
