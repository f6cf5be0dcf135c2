"""Bad input in the failure-mode tables (pod_status, health, devices' driver columns): one error naming
file, column and 1-based row, and the store untouched; good rows load and stage as documented."""

from __future__ import annotations

import pandas as pd
import pytest

from gpuwatch import store
from gpuwatch.store.validate import BundleError

TS = "2026-11-20T08:00:00Z"
STATUS = {"ts": [TS, "2026-11-20T08:05:00Z"], "namespace": ["ml", "ml"], "pod": ["train-0", "train-0"],
          "container": ["main", "main"], "phase": ["Running", "running"], "restarts": [0, 1],
          "last_terminated_reason": [None, "Error"], "last_exit_code": [None, 1],
          "waiting_reason": [None, "CrashLoopBackOff"], "job": ["train", "train"], "gpu_request": [1.0, 1.0]}
HEALTH = {"ts": [TS], "node": ["n1"], "gpu_uuid": ["GPU-1"], "kind": ["xid"], "code": [79]}


@pytest.fixture
def con():
    connection = store.connect(None)
    yield connection
    connection.close()


def _counts(con) -> tuple:
    return tuple(con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in ("pod_status", "health", "devices"))


def test_good_rows_load_and_stage(con):
    store.load(con, {"pod_status": pd.DataFrame(STATUS), "health": pd.DataFrame(HEALTH),
                     "devices": pd.DataFrame({"node": ["n1"], "gpu_uuid": ["GPU-1"], "gpu_model": ["NVIDIA H100 80GB HBM3"],
                                              "driver_version": ["550.127.08"], "cuda_driver_version": ["12.4"]})},
               source="t")
    rows = con.execute("SELECT phase, restarts, waiting_reason, until_ts FROM stg_pod_status ORDER BY ts").fetchall()
    assert [r[:3] for r in rows] == [("Running", 0, None), ("running", 1, "CrashLoopBackOff")]
    assert rows[0][3] is not None and rows[1][3] is None  # a state holds until the pod's next row
    assert con.execute("SELECT kind, code FROM stg_health").fetchall() == [("xid", 79)]
    assert con.execute("SELECT driver_version, cuda_driver_version FROM stg_devices").fetchall() == [("550.127.08", "12.4")]


@pytest.mark.parametrize(("table", "column", "value", "message"), [
    ("pod_status", "phase", "Sleeping", "'Sleeping' is not one of Pending, Running, Succeeded, Failed, Unknown"),
    ("pod_status", "restarts", -1, "negative value"),
    ("pod_status", "last_exit_code", "one", "is not a number"),
    ("pod_status", "gpu_request", -0.5, "negative value"),
    ("pod_status", "ts", "yesterday", "bad timestamp"),
    ("pod_status", "pod", None, "required value is empty"),
    ("health", "kind", "fire", "'fire' is not one of xid, ecc_dbe, row_remap_failure, lost"),
    ("health", "code", -3, "negative value"),
    ("health", "gpu_uuid", None, "required value is empty"),
    ("health", "ts", 1.0e13, "bad timestamp"),
])
def test_a_bad_cell_names_file_column_and_row_and_loads_nothing(con, table, column, value, message):
    store.load(con, {"health": pd.DataFrame(HEALTH)}, source="before")
    before = _counts(con)
    good = pd.DataFrame(STATUS if table == "pod_status" else HEALTH)
    bad = pd.concat([good, good.iloc[[0]].assign(**{column: [value]})], ignore_index=True)
    with pytest.raises(BundleError) as caught:
        store.load(con, {"devices": pd.DataFrame({"node": ["n2"], "gpu_uuid": ["GPU-2"], "gpu_model": ["x"]}),
                         table: bad}, source="input")
    text = str(caught.value)
    assert f"input:{table}: column {column!r}, row {len(bad)}:" in text and message in text, text
    assert _counts(con) == before, "a failed load must leave the store as it was"


def test_unknown_and_missing_columns_are_refused(con):
    with pytest.raises(BundleError, match="unknown column"):
        store.load(con, {"health": pd.DataFrame(HEALTH).assign(severity="hardware")}, source="input")
    with pytest.raises(BundleError, match=r"missing required column.*'kind'"):
        store.load(con, {"health": pd.DataFrame(HEALTH).drop(columns="kind")}, source="input")


def test_a_reload_replaces_rows_by_key(con):
    store.load(con, {"health": pd.DataFrame(HEALTH)}, source="a")
    store.load(con, {"health": pd.DataFrame(HEALTH).assign(code=[48])}, source="b")
    assert con.execute("SELECT code FROM health").fetchall() == [(48,)]
