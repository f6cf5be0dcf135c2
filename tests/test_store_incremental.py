"""Incremental staging (store/restage.py) stages exactly what a full refresh stages.

A simulated fleet (failures and topology planted) is loaded once as a whole and again hour by hour:
in order, out of order, and with hours sent again. Every staged table and every `gpuwatch analyze`
output must be byte for byte the same as after the whole load.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from gpuwatch import cli, store
from gpuwatch.store import bundle as bundle_files
from gpuwatch.store import restage
from tests.support.bundles import by_hour, small_fleet, without_samples

STAGED = {"stg_sample_rows": "stream_id, ts", "stg_streams": "stream_id", "stg_stream_dts": "stream_id, dt_seconds",
          "stg_stream_aliases": "stream_id, raw_namespace, raw_pod, raw_container"}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """Six hours of the 16-GPU fleet (seed 3): still hours in and out of order, re-sent, a middle hour
    with a vanished pod, and key-id collisions from the second hour on; every finding that had rows over half a
    day still has rows. A load's cost is mostly fixed, so twelve hours doubled the replays for no property."""
    return small_fleet(tmp_path_factory.mktemp("incremental") / "bundle", seed=3, days=0.25)


@pytest.fixture(scope="module")
def static(bundle, tmp_path_factory) -> Path:
    """The bundle without its samples (loaded the same way as the whole bundle: DuckDB reads the files)."""
    return without_samples(bundle, tmp_path_factory.mktemp("static"))


@pytest.fixture(scope="module")
def frames(bundle, static) -> dict:
    return {"static": static, "samples": pd.read_parquet(bundle_files.find_files(bundle)["samples"])}


@pytest.fixture(scope="module")
def whole(bundle, tmp_path_factory) -> tuple[Path, Path]:
    db = tmp_path_factory.mktemp("whole") / "whole.duckdb"
    con = store.connect(str(db))
    store.load_bundle(con, bundle)
    con.close()
    return db, _analyze(db, tmp_path_factory.mktemp("whole_out"))


def _analyze(db: Path, out: Path) -> Path:
    assert cli.main(["analyze", "--db", str(db), "--out", str(out)]) == 0
    return out


def _load_byby_hour(db: Path, frames: dict, order: list[int], *, resend: list[int] = ()) -> None:
    con = store.connect(str(db))
    store.load_bundle(con, frames["static"])
    hours = by_hour(frames["samples"])
    for i in [*order, *resend]:
        store.load(con, {"samples": hours[i]}, source=f"hour {i}")
    con.close()


# The staged columns holding raw key ids (the same in two stores unless two keys' hashes collided), and
# what each stands for.
KEY_IDS = {"stg_stream_aliases": "key_id", "stg_sample_rows": "container_key"}
STANDS_FOR = "SELECT stream_id, ts, container FROM stg_samples ORDER BY stream_id, ts"


def _assert_same_staging(db: Path, reference: Path, *, key_ids: bool = True) -> None:
    """``key_ids``: the raw keys' ids too; else what they stand for (a row's container)."""
    queries = [f"SELECT * {'' if key_ids or table not in KEY_IDS else f'EXCLUDE ({KEY_IDS[table]})'} FROM {table} "
               f"ORDER BY {order}" for table, order in STAGED.items()]
    mine, theirs = store.connect(str(db), read_only=True), store.connect(str(reference), read_only=True)
    for query in queries if key_ids else [*queries, STANDS_FOR]:
        pd.testing.assert_frame_equal(mine.execute(query).df(), theirs.execute(query).df(), check_exact=True, obj=query)
    mine.close()
    theirs.close()


def _assert_same_outputs(out: Path, reference: Path) -> None:
    names = sorted(p.name for p in reference.iterdir())
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


@pytest.fixture
def every_load_incremental(monkeypatch):
    """Re-stage incrementally from the second load on (by default a load larger than a quarter of the
    store re-stages everything)."""
    monkeypatch.setattr(restage, "FULL_SHARE", float("inf"))


@pytest.mark.parametrize("case", ["in order", "out of order, hours sent again"])
def test_hour_by_hour_stages_and_finds_what_one_load_does(case, frames, whole, tmp_path, every_load_incremental):
    count = len(by_hour(frames["samples"]))
    order = list(range(count))
    resend: list[int] = []
    if case != "in order":
        rng = random.Random(7)
        rng.shuffle(order)
        resend = rng.sample(range(count), 3)
    db = tmp_path / "hours.duckdb"
    _load_byby_hour(db, frames, order, resend=resend)
    _assert_same_staging(db, whole[0])
    _assert_same_outputs(_analyze(db, tmp_path / "out"), whole[1])
    _assert_same_persisted(db, whole[0])


def _assert_same_persisted(db: Path, reference: Path) -> None:
    """The results analyze stored (the app and the report read them) are the same to the last bit: no
    sum or pick in them depends on the order the rows were scanned in."""
    mine, theirs = store.connect(str(db), read_only=True), store.connect(str(reference), read_only=True)
    keys = [k for (k,) in theirs.execute("SELECT key FROM analysis_results ORDER BY key").fetchall()]
    assert keys and keys == [k for (k,) in mine.execute("SELECT key FROM analysis_results ORDER BY key").fetchall()]
    for key in keys:  # keys are hex digests, never data
        a = mine.execute(f"SELECT * FROM analysis_result_{key} ORDER BY ALL").df()
        b = theirs.execute(f"SELECT * FROM analysis_result_{key} ORDER BY ALL").df()
        pd.testing.assert_frame_equal(a, b, check_exact=True, obj=key)
    mine.close()
    theirs.close()


def test_a_partial_resend_and_a_vanished_pod_restage_exactly(frames, whole, tmp_path, every_load_incremental):
    """An hour of one node sent again with one pod gone from its rows (its GPU unallocated), then sent
    back as it was: a stream losing and regaining rows in the middle of its series, another stream
    appearing and vanishing, neighbours on both sides."""
    hours = by_hour(frames["samples"])
    db = tmp_path / "partial.duckdb"
    _load_byby_hour(db, frames, list(range(len(hours))))
    con = store.connect(str(db))
    middle = hours[len(hours) // 2]
    node = sorted(middle["node"].unique())[0]
    one_node = middle[middle["node"] == node]
    pod = one_node["pod"].dropna().iloc[0]
    gone = one_node.copy()
    gone.loc[gone["pod"] == pod, ["namespace", "pod"]] = None
    store.load(con, {"samples": gone}, source="a pod's rows lost")
    assert con.execute("SELECT count(*) FROM stg_samples WHERE pod = $p AND ts BETWEEN $lo AND $hi",
                       {"p": pod, "lo": one_node["ts"].min(), "hi": one_node["ts"].max()}).fetchone()[0] == 0
    store.load(con, {"samples": one_node}, source="sent again")
    con.close()
    _assert_same_staging(db, whole[0])


def test_a_small_load_restages_incrementally_by_default(frames, tmp_path, monkeypatch):
    """The default path: the last hour into the rest of the data is re-staged, not refreshed whole."""
    hours = by_hour(frames["samples"])
    db = tmp_path / "default.duckdb"
    con = store.connect(str(db))
    store.load_bundle(con, frames["static"])
    store.load(con, {"samples": pd.concat(hours[:-1])}, source="all but the last hour")
    full = []
    monkeypatch.setattr(restage, "refresh", lambda c: full.append(c))
    store.load(con, {"samples": hours[-1]}, source="the last hour")
    assert full == []
    con.close()


# Stand-ins for sample_key_id() (schema.sql), written into a test store: every key hashed to one id, and
# a hash unlike the one the stored keys were written with (another DuckDB's), colliding often.
ONE_ID = "CAST(0 AS BIGINT)"
ANOTHER_HASH = "CAST(hash(gpu_uuid, 'another') % 3 AS BIGINT)"


def _hash_keys_with(con, body: str) -> None:
    con.execute(f"CREATE OR REPLACE MACRO sample_key_id(node, gpu_uuid, mig_gi_id, namespace, pod, container) AS {body}")


@pytest.mark.parametrize("case", ["every key one id, one load", "another hash from the second hour on, hours sent again"])
def test_keys_whose_ids_collide_store_stage_and_find_what_one_load_does(case, bundle, frames, whole, tmp_path,
                                                                         every_load_incremental):
    """A key whose computed id another key holds gets the next free negative id, and its rows take their
    ids from sample_keys (store/keys.py): nothing is merged, lost or found differently. The hash changes
    after the first hour: the fleet's later keys (its planted nodes' pods) arrive in the second."""
    db = tmp_path / "collide.duckdb"
    con = store.connect(str(db))
    if case.startswith("every key"):
        _hash_keys_with(con, ONE_ID)
        store.load_bundle(con, bundle)
    else:
        store.load_bundle(con, frames["static"])
        hours = by_hour(frames["samples"])
        switch, middle = 1, len(hours) // 2
        for i in range(switch):
            store.load(con, {"samples": hours[i]}, source=f"hour {i}")
        _hash_keys_with(con, ANOTHER_HASH)
        for i in [*range(switch, len(hours)), 0, middle, len(hours) - 1]:
            store.load(con, {"samples": hours[i]}, source=f"hour {i}")
    found = con.execute("SELECT count(*), count(DISTINCT key_id), count(DISTINCT (node, gpu_uuid, mig_gi_id, namespace, "
                        "pod, container)), count(*) FILTER (WHERE key_id < 0) FROM sample_keys").fetchone()
    assert found[0] == found[1] == found[2] and found[3] > 0  # one id per key, and the collision path taken
    theirs = store.connect(str(whole[0]), read_only=True)
    assert con.execute("SELECT * FROM samples ORDER BY ALL").fetchall() == \
        theirs.execute("SELECT * FROM samples ORDER BY ALL").fetchall()
    theirs.close()
    con.close()
    _assert_same_staging(db, whole[0], key_ids=False)
    _assert_same_outputs(_analyze(db, tmp_path / "out"), whole[1])


def test_a_store_with_samples_in_one_table_is_split_on_its_first_writable_open(whole, tmp_path):
    """Stores written before samples became keys and readings held ``samples`` as one table with the
    bundle's columns, aliases without key ids and staged rows as a table with reported and effective: the
    first writable open moves the samples and re-stages, changing no sample and no finding."""
    db = tmp_path / "legacy.duckdb"
    shutil.copyfile(whole[0], db)
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE legacy AS SELECT * FROM samples")
    con.execute("CREATE TABLE legacy_rows AS SELECT * FROM stg_sample_rows")
    con.execute("DROP VIEW samples; DROP TABLE sample_readings; DROP TABLE sample_keys")
    con.execute("DROP VIEW stg_sample_rows; DROP TABLE stg_sample_rows_stored")
    con.execute("ALTER TABLE legacy RENAME TO samples; ALTER TABLE legacy_rows RENAME TO stg_sample_rows")
    con.execute("ALTER TABLE stg_stream_aliases DROP COLUMN key_id; ALTER TABLE stg_stream_aliases DROP COLUMN raw_container")
    con.execute("UPDATE store_meta SET value = 'an older gpuwatch' WHERE key = 'staging'")
    con.close()
    con = store.connect(str(db))
    kinds = dict(con.execute("SELECT table_name, table_type FROM information_schema.tables WHERE table_name IN "
                             "('samples', 'sample_readings', 'sample_keys', 'legacy_samples')").fetchall())
    assert kinds == {"samples": "VIEW", "sample_readings": "BASE TABLE", "sample_keys": "BASE TABLE"}
    theirs = store.connect(str(whole[0]), read_only=True)
    for query in ("SELECT * FROM samples ORDER BY ALL", "SELECT * FROM sample_keys ORDER BY ALL"):
        assert con.execute(query).fetchall() == theirs.execute(query).fetchall(), query
    theirs.close()
    con.close()
    _assert_same_staging(db, whole[0])
    _assert_same_outputs(_analyze(db, tmp_path / "out"), whole[1])
