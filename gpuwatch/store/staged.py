"""The store's SQL scripts and the full staging refresh (store/staging.sql's tables, a node range at a time).

A load re-stages only what it touched (store/restage.py); ``refresh`` rebuilds every staged table from
the raw ones (a new store, a store staged by other SQL, a linked Parquet bundle, a load larger than
what is stored). Both give the same rows (tests/test_store_incremental.py).
"""

from __future__ import annotations

from importlib import resources
from typing import Any

# Rows staged per query: the series window sorts its rows in memory, ~200 bytes each.
REFRESH_CHUNK_ROWS = 3_000_000


def script(name: str) -> str:
    """The text of one of the store's .sql files."""
    return resources.files("gpuwatch.store").joinpath(name).read_text()


def run(con: Any, name: str, params: dict | None = None) -> None:
    """Run one of the store's .sql scripts statement by statement (separated by ";" + a blank line),
    binding to each statement the named ``params`` it uses."""
    for statement in script(name).split(";\n\n"):
        used = {k: v for k, v in (params or {}).items() if f"${k}" in statement}
        if statement.strip():
            con.execute(statement, used)


def refresh(con: Any, *, chunk_rows: int | None = None) -> None:
    """Rebuild the materialised staging tables behind stg_samples (load() does this in its transaction)."""
    con.execute(script("refresh.sql"), {"salt": stream_salt(con)})
    if collisions(con):
        con.execute("INSERT OR REPLACE INTO store_meta VALUES ('stream_salt', ?)", [str(stream_salt(con) + 1)])
        refresh(con, chunk_rows=chunk_rows)
        return
    run(con, "refresh_empty.sql")
    chunk = script("refresh_chunk.sql")
    ranges = node_ranges(con.execute(script("refresh_nodes.sql")).fetchall(), chunk_rows=chunk_rows or REFRESH_CHUNK_ROWS)
    # merging duplicates is a 20M-group aggregate: every range is staged without it, then the ranges
    # whose staged rows show a (stream, ts) twice are staged again with it
    for lo, hi in ranges:
        con.execute(chunk, {"node_lo": lo, "node_hi": hi, "dedup": False})
    doubled = [node for (node,) in con.execute(script("refresh_dups.sql")).fetchall()]
    for lo, hi in ranges:
        if any(lo <= node <= hi for node in doubled):
            bounds = {"node_lo": lo, "node_hi": hi}
            con.execute("DELETE FROM stg_sample_rows_stored WHERE stream_id IN (SELECT stream_id FROM stg_stream_aliases "
                        "WHERE node >= $node_lo AND node <= $node_hi)", bounds)
            con.execute(chunk, {**bounds, "dedup": True})
    con.execute(script("refresh_dts.sql"))
    con.execute(script("refresh_streams.sql"))


def stream_salt(con: Any) -> int:
    """The salt of this store's stream ids (staging.sql's stg_stream_salt(): 0 until a collision changes it)."""
    return int(con.execute("SELECT stg_stream_salt()").fetchone()[0])


def collisions(con: Any) -> bool:
    """True when two stream keys of stg_stream_aliases share an id."""
    return bool(con.execute(script("stream_collisions.sql")).fetchall())


def node_ranges(counts: list[tuple[str, int]], *, chunk_rows: int) -> list[tuple[str, str]]:
    """Cut (node, rows) pairs, in node order, into inclusive node ranges of about ``chunk_rows``."""
    ranges, first, previous, pending = [], None, None, 0
    for node, rows in counts:
        if first is not None and pending + rows > chunk_rows:
            ranges.append((first, previous))
            first, pending = None, 0
        first = node if first is None else first
        previous, pending = node, pending + rows
    if first is not None:
        ranges.append((first, previous))
    return ranges
