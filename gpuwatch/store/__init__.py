"""The store: a DuckDB file with raw bundle tables (schema.sql) and stg_* views (staging.sql).

``load``/``load_bundle`` validate every row, then write in ONE transaction: a bad row anywhere
leaves the store exactly as it was. Re-loading a samples window replaces that window; devices,
pods and prices are upserted by key.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store import bundle, columns
from gpuwatch.store.columns import ROW
from gpuwatch.store.validate import BundleError, validate

__all__ = ["BundleError", "connect", "data_range", "has_table", "link_bundle", "load", "load_bundle", "refresh"]

# Upsert keys; NULL MIG ids compare equal (IS NOT DISTINCT FROM).
_KEYS = {"devices": ("node", "gpu_uuid", "mig_gi_id"), "pods": ("namespace", "pod", "pod_uid"),
         "prices": ("gpu_model",)}


# DuckDB takes 80% of RAM by default; a store is one process among many (a pod, a laptop), so cap
# it and let large sorts and windows spill to disk instead. Override: GPUWATCH_DUCKDB_MEMORY_LIMIT.
DEFAULT_MEMORY_LIMIT = "2GB"


def connect(path: str | None, *, read_only: bool = False, memory_limit: str | None = None):
    """Open (or create) the store; creates raw tables and staging views unless read-only."""
    import duckdb

    limit = memory_limit or os.environ.get("GPUWATCH_DUCKDB_MEMORY_LIMIT", DEFAULT_MEMORY_LIMIT)
    config = {"memory_limit": limit, "preserve_insertion_order": False}
    if path is None:  # an in-memory store spills to the system temp directory
        config["temp_directory"] = os.path.join(tempfile.gettempdir(), "gpuwatch-duckdb")
    con = duckdb.connect(":memory:" if path is None else str(path), read_only=read_only, config=config)
    con.execute("SET TimeZone = 'UTC'")
    con.execute("SET enable_progress_bar = false")  # long queries must not draw on the caller's terminal
    if read_only and _old_staging(con):
        con.close()
        raise BundleError(f"{path}: this store was written by gpuwatch 0.1.0; open it once for writing "
                          "(gpuwatch ingest or analyze) to re-stage it")
    if not read_only:
        stale = _drop_old_staging(con)
        for script in ("schema.sql", "reclaim_audit.sql", "staging.sql"):
            con.execute(_script(script))
        if stale:
            refresh(con)
    return con


def _drop_old_staging(con: Any) -> bool:
    """Stores written before stg_samples became a view hold it as a table: drop it (it is derived;
    the caller re-stages from the raw tables). True when it did."""
    old = _old_staging(con)
    if old:
        con.execute("DROP TABLE stg_samples")
    return old


def _old_staging(con: Any) -> bool:
    return con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'stg_samples'").fetchall()[0][0] > 0


# Rows staged per query: the series window sorts its rows in memory, ~200 bytes each.
REFRESH_CHUNK_ROWS = 3_000_000


def refresh(con: Any, *, chunk_rows: int | None = None) -> None:
    """Rebuild the materialised staging tables behind stg_samples (load() does this in its transaction)."""
    con.execute(_script("refresh.sql"))
    chunk, dups, steps = _script("refresh_chunk.sql"), _script("refresh_dups.sql"), _script("refresh_steps.sql")
    for lo, hi in node_ranges(con.execute(_script("refresh_nodes.sql")).fetchall(),
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


def ensure_reclaim_audit(con) -> None:
    """Create the ``reclaim_audit`` table when missing (the reclaim controller may use any file)."""
    con.execute(_script("reclaim_audit.sql"))


def _script(name: str) -> str:
    return resources.files(__package__).joinpath(name).read_text()


def has_table(con: Any, name: str) -> bool:
    """True when a table or view called ``name`` exists."""
    found = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = $n "
                        "UNION ALL SELECT count(*) FROM duckdb_views() WHERE view_name = $n", {"n": name}).fetchall()
    return sum(r[0] for r in found) > 0


def load(con: Any, frames: dict, *, source: str, window: tuple[datetime, datetime] | None = None) -> dict[str, int]:
    """Validate ``frames`` (bundle name -> DataFrame), then load them in one transaction."""
    typed = {name: validate(name, frame, file=f"{source}:{name}") for name, frame in frames.items()}
    if "samples" in typed and window is None and len(typed["samples"]):
        window = (typed["samples"]["ts"].min(), typed["samples"]["ts"].max())
    samples = [typed.pop("samples")] if "samples" in frames else None
    return _write(con, typed, samples, source=source, window=window)


def load_bundle(con: Any, path: str | Path, *, window: tuple[datetime, datetime] | None = None,
                progress: bool | None = False) -> dict[str, int]:
    """Load a bundle directory (any subset of its files); DuckDB checks, types and inserts it."""

    files = bundle.find_files(path)
    counts = {name: 0 for name in BUNDLE_COLUMNS}
    with _transaction(con):
        for name, file in files.items():
            if name != "samples":
                counts[name] = sum(_from_file(con, name, part, file=file, upsert=True) for part in bundle.parts(file))
        if "samples" in files:
            _check_not_linked(con)
            window = window or _ts_range(con, files["samples"])
            if window is not None:
                con.execute("DELETE FROM samples WHERE ts >= $lo AND ts <= $hi", {"lo": window[0], "hi": window[1]})
            counts["samples"] = sum(_from_file(con, "samples", part, file=files["samples"])
                                    for part in bundle.parts(files["samples"]))
        _log(con, source=str(path), window=window, counts=counts)
        refresh(con)
    return counts


def link_bundle(con: Any, path: str | Path) -> dict[str, int]:
    """Like load_bundle, but samples stay in the bundle's Parquet: ``samples`` becomes a view over the
    files (checked once, here), and only the staged table is materialised (DESIGN §7; large fleets).
    The files must stay where they are; linking again replaces the link."""

    files = bundle.find_files(path)
    samples = files.get("samples")
    if samples is None or not (samples.suffix == ".parquet" or samples.is_dir()):
        raise BundleError(f"{path}: --link needs samples as Parquet (samples.parquet or a samples/ directory)")
    counts = {name: 0 for name in BUNDLE_COLUMNS}
    with _transaction(con):
        for name, file in files.items():
            if name != "samples":
                counts[name] = sum(_from_file(con, name, part, file=file, upsert=True) for part in bundle.parts(file))
        view, types = next(bundle.parts(samples))(con)
        values, rules = columns.plan("samples", types, file=str(samples))
        bad = columns.first_bad(con, view, rules)
        if bad is not None:
            raise bad
        con.execute("DROP TABLE IF EXISTS samples")
        con.execute(f"CREATE OR REPLACE VIEW samples AS SELECT {', '.join(values)} FROM {bundle.parquet_source(samples)}")
        counts["samples"] = con.execute("SELECT count(*) FROM samples").fetchall()[0][0]
        _log(con, source=f"{path} (linked)", window=None, counts=counts)
        refresh(con)
    return counts


def _check_not_linked(con: Any) -> None:
    if con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'samples'").fetchall()[0][0]:
        raise BundleError("this store's samples are linked Parquet files (ingest --link); link again instead")


class _Invalid(Exception):
    """A guard fired: the load is rolled back, then ``diagnose`` names the first bad row."""

    def __init__(self, diagnose):
        super().__init__("invalid bundle row")
        self.diagnose = diagnose


@contextmanager
def _transaction(con: Any):
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except _Invalid as exc:
        con.execute("ROLLBACK")
        raise exc.diagnose() from None
    except BaseException:
        con.execute("ROLLBACK")
        raise


def _from_file(con: Any, name: str, part, *, file: Path, upsert: bool = False) -> int:
    """Insert one part of a bundle file (typed and checked in the same statement); rows inserted."""
    import duckdb


    view, types = part(con)
    values, rules = columns.plan(name, types, file=str(file))
    select = f"SELECT {', '.join(values)}, {columns.ROW} FROM {view} WHERE {columns.guard(rules)}"
    try:
        if not upsert:
            return con.execute(f"INSERT INTO {name} SELECT * EXCLUDE ({columns.ROW}) FROM ({select})").fetchall()[0][0]
        con.execute(f"CREATE OR REPLACE TEMP TABLE incoming AS {select}")
    except duckdb.Error as exc:
        if not columns.is_invalid_row(exc):
            raise

        def diagnose(original=exc):
            again, _ = part(con)
            return columns.first_bad(con, again, rules) or original
        raise _Invalid(diagnose) from exc
    try:
        return _upsert_incoming(con, name)
    finally:
        con.execute("DROP TABLE incoming")


def _upsert_incoming(con: Any, name: str) -> int:
    # the last row of a key wins, as in a file read top to bottom
    keys = ", ".join(_KEYS[name])
    con.execute(f"CREATE OR REPLACE TEMP TABLE incoming AS SELECT * EXCLUDE ({ROW}) FROM incoming "
                f"QUALIFY row_number() OVER (PARTITION BY {keys} ORDER BY {ROW} DESC) = 1")
    match = " AND ".join(f"t.{k} IS NOT DISTINCT FROM i.{k}" for k in _KEYS[name])
    con.execute(f"DELETE FROM {name} t USING incoming i WHERE {match}")
    return con.execute(f"INSERT INTO {name} SELECT * FROM incoming").fetchall()[0][0]


def _ts_range(con: Any, file: Path) -> tuple[datetime, datetime] | None:
    """The samples' first and last timestamp, read from the ts column alone (bad values: later)."""

    lo = hi = None
    for part in bundle.parts(file, columns=["ts"]):
        view, types = part(con)
        if "ts" not in types:
            return None
        ts = columns.plan_ts(types["ts"])
        first, last = con.execute(f"SELECT min({ts}), max({ts}) FROM {view}").fetchall()[0]
        if first is not None:
            lo, hi = (first, last) if lo is None else (min(lo, first), max(hi, last))
    return None if lo is None else (lo, hi)


def _write(con: Any, small: dict, samples: Iterable | None, *, source: str, window) -> dict[str, int]:
    counts = {name: 0 for name in BUNDLE_COLUMNS}
    with _transaction(con):
        for name, frame in small.items():
            counts[name] = _upsert(con, name, frame)
        if samples is not None:
            _check_not_linked(con)
            if window is not None:
                con.execute("DELETE FROM samples WHERE ts >= $lo AND ts <= $hi", {"lo": window[0], "hi": window[1]})
            for frame in samples:
                counts["samples"] += _insert(con, "samples", frame)
        _log(con, source=source, window=window, counts=counts)
        refresh(con)
    return counts


def _upsert(con: Any, name: str, frame) -> int:
    frame = frame.drop_duplicates(subset=list(_KEYS[name]), keep="last")
    match = " AND ".join(f"t.{k} IS NOT DISTINCT FROM i.{k}" for k in _KEYS[name])
    con.register("incoming", frame)
    try:  # identifiers come from the fixed bundle schema, never from data
        con.execute(f"DELETE FROM {name} t USING incoming i WHERE {match}")
    finally:
        con.unregister("incoming")
    return _insert(con, name, frame)


def _insert(con: Any, name: str, frame) -> int:
    columns = ", ".join(BUNDLE_COLUMNS[name])
    con.register("incoming", frame)
    try:
        con.execute(f"INSERT INTO {name} ({columns}) SELECT {columns} FROM incoming")
    finally:
        con.unregister("incoming")
    return len(frame)


def _log(con: Any, *, source: str, window, counts: dict[str, int]) -> None:
    lo, hi = window if window is not None else (None, None)
    con.execute("INSERT INTO ingest_log VALUES ($at, $source, $lo, $hi, $d, $s, $p, $c)",
                {"at": datetime.now(UTC).replace(tzinfo=None), "source": source, "lo": lo, "hi": hi,
                 "d": counts["devices"], "s": counts["samples"], "p": counts["pods"], "c": counts["prices"]})



def data_range(con: Any) -> tuple[datetime | None, datetime | None]:
    """First timestamp of the data held and the end of its bulk (range.sql: the 90th percentile of
    the devices' last samples, so one device's outlier cannot move the default window); UTC, naive."""
    first, last = con.execute(_script("range.sql")).fetchone()
    return first, last
