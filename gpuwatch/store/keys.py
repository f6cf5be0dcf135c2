"""Raw sample keys: a load's samples are stored as their key's id (sample_keys) and their readings
(sample_readings); schema.sql's view ``samples`` joins them back into the bundle's columns.

A key's id is ``sample_key_id()`` of it, computed per row as the rows are written, unless some key
of the load holds another id (keys.sql: a key stored under an id from another DuckDB's hash, or a
hash collision): then the rows take their ids by joining their key to sample_keys.
"""

from __future__ import annotations

from typing import Any

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store.staged import run

KEY = BUNDLE_COLUMNS["samples"][1:7]  # node, gpu_uuid, mig_gi_id, namespace, pod, container
READINGS = BUNDLE_COLUMNS["samples"][7:]


def register(con: Any, select: str) -> bool:
    """Store the keys of ``select`` (a query with the bundle's key columns) that sample_keys lacks;
    True when its rows must take their ids from sample_keys (``readings(..., joined=True)``)."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW incoming_key_rows AS SELECT {', '.join(KEY)} FROM ({select})")
    run(con, "keys.sql")
    joined = con.execute("SELECT coalesce(bool_or(key_id <> computed_id), FALSE) FROM incoming_keys").fetchall()[0][0]
    con.execute("DROP TABLE incoming_keys; DROP VIEW incoming_key_rows")
    return bool(joined)


def readings(select: str, *, joined: bool) -> str:
    """sample_readings' columns from ``select`` (a query with the bundle's samples columns, whose keys
    are registered): ids computed per row, or (``joined``) looked up in sample_keys."""
    values = ", ".join(f"r.{c}" for c in READINGS)
    if not joined:
        return f"SELECT r.ts, sample_key_id({', '.join(f'r.{c}' for c in KEY)}) AS key_id, {values} FROM ({select}) r"
    match = " AND ".join(f"k.{c} IS NOT DISTINCT FROM r.{c}" for c in KEY)
    return f"SELECT r.ts, k.key_id, {values} FROM ({select}) r JOIN sample_keys k ON {match}"


def link(con: Any) -> None:
    """Samples linked, not loaded: sample_readings becomes a view over ``linked_samples`` (the bundle's
    Parquet, checked, as the bundle's columns); the keys are its keys."""
    if con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'sample_readings'").fetchall()[0][0]:
        con.execute("DROP TABLE sample_readings")
    con.execute("DELETE FROM sample_keys")
    joined = register(con, "SELECT * FROM linked_samples")
    con.execute(f"CREATE OR REPLACE VIEW sample_readings AS {readings('SELECT * FROM linked_samples', joined=joined)}")
