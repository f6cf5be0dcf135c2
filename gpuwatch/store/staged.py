"""The store's SQL scripts and the staging refresh (store/staging.sql's tables, a node range at a time)."""

from __future__ import annotations

from importlib import resources
from typing import Any


def script(name: str) -> str:
    """The text of one of the store's .sql files."""
    return resources.files("gpuwatch.store").joinpath(name).read_text()


# Rows staged per query: the series window sorts its rows in memory, ~200 bytes each.
REFRESH_CHUNK_ROWS = 3_000_000


def refresh(con: Any, *, chunk_rows: int | None = None) -> None:
    """Rebuild the materialised staging tables behind stg_samples (load() does this in its transaction)."""
    con.execute(script("refresh.sql"))
    chunk, dups, steps = script("refresh_chunk.sql"), script("refresh_dups.sql"), script("refresh_steps.sql")
    for lo, hi in node_ranges(con.execute(script("refresh_nodes.sql")).fetchall(),
                              chunk_rows=chunk_rows or REFRESH_CHUNK_ROWS):
        bounds = {"node_lo": lo, "node_hi": hi}
        # merging duplicates is a 20M-group aggregate; skip it where a cheap count shows there are none
        dedup = con.execute(dups, bounds).fetchall()[0][0]
        con.execute(chunk, {**bounds, "dedup": dedup})
        con.execute(steps, bounds)


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
