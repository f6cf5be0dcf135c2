"""Persisted analysis results: the SQL part of chosen analyses, computed once and stored in the DB.

Scanning 20M samples per analysis cannot fit an app page's 2 s on a small box, so the step that
writes the store (the analyze step, ``analyses.persist``) stores the default window; readers
(app, report: read-only connections) then get the stored rows from ``analyses.run`` instead of
re-running the SQL. A stored result is used only when everything that made it is unchanged: the
analysis' SQL text, its bound parameters and the store's data (``ingest_log``). Finishers still run
on top, so results are identical to a fresh run, column types and row order included.

Tables: ``analysis_results`` (one row per stored result) and one ``analysis_result_<key>`` table
per result, whose rowid order is the SQL's ORDER BY.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any

from gpuwatch.store.staged import script

INDEX = "analysis_results"


def key(name: str, sql: str, bound: dict[str, Any]) -> str:
    """Stable id of (analysis, SQL text, bound params, staging.sql): a change to any of them is a different
    result (staging.sql's macros, e.g. what a GPU costs or how a pod's cents round, are part of every
    analysis: a gpuwatch upgrade that changes them must not serve results stored by the old ones)."""
    params = json.dumps({k: _plain(v) for k, v in sorted(bound.items())}, sort_keys=True)
    return hashlib.sha256(f"{name}\n{sql}\n{params}\n{script('staging.sql')}".encode()).hexdigest()[:16]


def version(con: Any) -> str:
    """The store's data version: every load appends to ingest_log (store.load), so this changes with the data."""
    count, last = con.execute("SELECT count(*), max(loaded_at) FROM ingest_log").fetchone()
    return f"{count}@{last}"


def save(con: Any, name: str, sql: str, bound: dict[str, Any]) -> None:
    """Run ``sql`` with ``bound`` params and store its rows (writable connection; replaces an older copy)."""
    table = f"analysis_result_{key(name, sql, bound)}"
    con.execute(f"CREATE TABLE IF NOT EXISTS {INDEX} (key VARCHAR PRIMARY KEY, name VARCHAR, "
                "params VARCHAR, data_version VARCHAR, saved_at TIMESTAMP)")
    # insertion order must follow the SQL's ORDER BY: readers return rows in rowid order
    was = con.execute("SELECT current_setting('preserve_insertion_order')").fetchone()[0]
    con.execute("SET preserve_insertion_order = true")
    try:  # the table name is a hex digest, never data
        con.execute(f"CREATE OR REPLACE TABLE {table} AS {sql}", bound)
    finally:
        con.execute(f"SET preserve_insertion_order = {'true' if was else 'false'}")
    params = json.dumps({k: _plain(v) for k, v in sorted(bound.items())}, sort_keys=True)
    con.execute(f"INSERT OR REPLACE INTO {INDEX} VALUES ($key, $name, $params, $version, $at)",
                {"key": table.removeprefix("analysis_result_"), "name": name, "params": params,
                 "version": version(con), "at": dt.datetime.now(dt.UTC).replace(tzinfo=None)})


def prune(con: Any) -> int:
    """Drop stored results of older data (no reader can use them again); returns how many."""
    if not _indexed(con):
        return 0
    stale = [k for (k,) in con.execute(f"SELECT key FROM {INDEX} WHERE data_version <> $v",
                                       {"v": version(con)}).fetchall()]
    for digest in stale:  # keys are hex digests (key()), never data
        con.execute(f"DROP TABLE IF EXISTS analysis_result_{digest}")
        con.execute(f"DELETE FROM {INDEX} WHERE key = $k", {"k": digest})
    return len(stale)


def _indexed(con: Any) -> bool:
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $t", {"t": INDEX}).fetchone()[0] > 0


def current(con: Any, name: str, sql: str, bound: dict[str, Any]) -> bool:
    """True when this exact (analysis, SQL, params) is stored for the store's data as it is now."""
    if not _indexed(con):
        return False
    found = con.execute(f"SELECT data_version FROM {INDEX} WHERE key = $k", {"k": key(name, sql, bound)}).fetchone()
    return found is not None and found[0] == version(con)  # else never stored, or the data changed since


def load(con: Any, name: str, sql: str, bound: dict[str, Any]):
    """The stored rows of this exact (analysis, SQL, params, data version) as a DataFrame, else None."""
    if not current(con, name, sql, bound):
        return None
    return con.execute(f"SELECT * FROM analysis_result_{key(name, sql, bound)} ORDER BY rowid").df()


def _plain(value: Any) -> Any:
    """JSON-able, type-preserving form of a bound parameter (2026-11-09 and '2026-11-09' differ)."""
    if isinstance(value, dt.datetime | dt.date):
        return {"datetime": value.isoformat()}
    if hasattr(value, "isoformat"):  # pandas.Timestamp
        return {"datetime": value.isoformat()}
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return {type(value).__name__: str(value)}
