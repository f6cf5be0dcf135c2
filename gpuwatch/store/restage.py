"""Incremental staging: a load re-stages only the devices and time ranges its samples replace.

A load's samples replace, per device, the stored samples at the timestamps it carries
(replace_series.sql); the device's range between its first and last new timestamp is re-staged
whole, new and kept readings alike (restage_range.sql). Staging is per stream and per row with two
exceptions, both handled exactly: each series row carries its neighbours' interval and readings (so
the rows just outside a replaced range change too), and each stream's step is the median of its
intervals (kept as counts per interval in stg_stream_dts, so a load adds and removes counts instead of
scanning the stream). The result equals a full ``refresh`` row for row (tests/test_store_incremental.py); a load larger than a
share of what is stored, or into a store with nothing staged, takes the full refresh instead.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from gpuwatch.store import keys
from gpuwatch.store.staged import collisions, refresh, run, stream_salt

# A load carrying more new samples than this share of the stored ones re-stages everything (one pass
# over all rows costs less than finding neighbours and patching them for most of the store).
FULL_SHARE = 0.25


def replace_samples(con: Any) -> tuple[datetime, datetime] | None:
    """Replace stored samples by ``incoming_samples`` (checked, the bundle's columns) and re-stage;
    returns the overall first and last new timestamp (None when there were none)."""
    lo, hi, new = con.execute("SELECT min(ts), max(ts), count(*) FROM incoming_samples").fetchall()[0]
    stored = con.execute("SELECT count(*) FROM stg_sample_rows").fetchall()[0][0]
    if not new:
        con.execute("DROP TABLE incoming_samples")
        restage_streams(con)
        return None
    incremental = bool(stored and new <= FULL_SHARE * stored)
    run(con, "restage_carried.sql")
    if incremental:  # what goes, counted before it goes
        run(con, "restage_removed.sql")
    joined = keys.register(con, "SELECT * FROM incoming_samples")
    con.execute(f"CREATE OR REPLACE TEMP TABLE incoming_readings AS {keys.readings('SELECT * FROM incoming_samples', joined=joined)}")
    run(con, "replace_series.sql")
    con.execute("INSERT INTO sample_readings SELECT * FROM incoming_readings")
    if incremental:
        _restage(con)
    else:
        refresh(con)
    run(con, "restage_drop.sql")
    con.execute("DROP TABLE incoming_samples; DROP TABLE incoming_readings")
    return lo, hi


def stage_all(con: Any) -> tuple[datetime, datetime] | None:
    """After a first load (its rows went straight into samples): stage everything; the first and last
    timestamp (None without samples)."""
    refresh(con)
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM sample_readings").fetchall()[0]
    return None if lo is None else (lo, hi)


def _restage(con: Any) -> None:
    run(con, "restage_aliases.sql", {"salt": stream_salt(con)})
    run(con, "restage_range.sql")
    if collisions(con):  # two stream keys share an id: another salt, everything again
        con.execute("INSERT OR REPLACE INTO store_meta VALUES ('stream_salt', ?)", [str(stream_salt(con) + 1)])
        refresh(con)
        return
    run(con, "restage_input.sql")
    run(con, "restage_apply.sql")
    run(con, "refresh_streams.sql")


def restage_streams(con: Any) -> None:
    """After a load without samples (pods, prices, teams, devices): the streams' prices, teams and
    shares as they are now."""
    run(con, "refresh_streams.sql")
