"""The hourly rollup (store/rollup.sql): kept current by recomputing only the hours loads replaced.

A load of samples replaces, per device, the stored rows at the timestamps it carries, all between its
first and last new one; its ingest_log row records a window that holds them (store/load.py). ``update`` recomputes the stored
hours those windows touch since the rollup was last brought up to date, and everything when the rows'
stream ids or staging SQL changed, a load's window is unknown, or the thresholds differ. The result is
the rollup a pass over every row would give (tests/test_rollup.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from gpuwatch.store.staged import stream_salt

EVERYTHING = (datetime(1, 1, 1), datetime(9999, 12, 31))


def update(con: Any, *, idle_below: float, false_reported_min: float, false_effective_below: float) -> int:
    """Bring the rollup up to date for these thresholds (writable connection, inside the caller's
    transaction or its own statements); returns how many hour ranges were recomputed (0: it was current)."""
    thresholds = (float(idle_below), float(false_reported_min), float(false_effective_below))
    if con.execute("SELECT rollup_current($1, $2, $3)", list(thresholds)).fetchone()[0]:
        return 0
    log_rows = con.execute("SELECT count(*) FROM ingest_log").fetchone()[0]
    ranges = _stale_ranges(con, thresholds)
    for lo, hi in ranges:
        con.execute("DELETE FROM rollup_stream_hours WHERE hour >= $lo AND hour < $hi", {"lo": lo, "hi": hi})
        con.execute("INSERT INTO rollup_stream_hours SELECT * FROM rollup_parts($lo, $hi, $i, $m, $b)",
                    {"lo": lo, "hi": hi, "i": thresholds[0], "m": thresholds[1], "b": thresholds[2]})
    con.execute("DELETE FROM rollup_meta")
    con.execute("INSERT INTO rollup_meta VALUES ((SELECT value FROM store_meta WHERE key = 'staging'), $salt, $rows, "
                "$i, $m, $b)", {"salt": str(stream_salt(con)), "rows": log_rows, "i": thresholds[0],
                                "m": thresholds[1], "b": thresholds[2]})
    return len(ranges)


def _stale_ranges(con: Any, thresholds: tuple[float, float, float]) -> list[tuple[datetime, datetime]]:
    """Clock-hour ranges to recompute: those of the sample loads since the rollup was made, merged; the
    whole time axis when the stored hours were made on another basis or a load's window is unknown."""
    meta = con.execute("SELECT staging, salt, log_rows, idle_below, false_reported_min, false_effective_below "
                       "FROM rollup_meta").fetchall()
    basis = con.execute("SELECT value FROM store_meta WHERE key = 'staging'").fetchone()[0]
    if not meta or meta[0][:2] != (basis, str(stream_salt(con))) or tuple(meta[0][3:]) != thresholds:
        return [EVERYTHING]
    # ingest_log only ever grows (store/load.py appends one row per load): rows past the count the
    # rollup includes are the loads since, in order
    loads = con.execute("SELECT window_start, window_end FROM ingest_log WHERE rowid >= $n AND samples > 0",
                        {"n": meta[0][2]}).fetchall()
    if any(lo is None or hi is None for lo, hi in loads):
        return [EVERYTHING]
    return _merged(sorted((_floor_hour(lo), _floor_hour(hi) + timedelta(hours=1)) for lo, hi in loads))


def _floor_hour(ts: datetime) -> datetime:
    return ts.replace(minute=0, second=0, microsecond=0)


def _merged(ranges: list[tuple[datetime, datetime]]) -> list[tuple[datetime, datetime]]:
    out: list[tuple[datetime, datetime]] = []
    for lo, hi in ranges:
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
