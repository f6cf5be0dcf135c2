"""The store: a DuckDB file with raw bundle tables (schema.sql) and stg_* views (staging.sql).

``load``/``load_bundle`` validate every row, then write in ONE transaction: a bad row anywhere
leaves the store exactly as it was. Re-loading a samples window replaces that window; devices,
pods and prices are upserted by key.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store.validate import BundleError, validate

__all__ = ["BundleError", "connect", "data_range", "has_table", "load", "load_bundle", "refresh"]

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
    if not read_only:
        for script in ("schema.sql", "staging.sql"):
            con.execute(_script(script))
    return con


def refresh(con: Any) -> None:
    """Rebuild the materialised staging table stg_samples (load() does this in its transaction)."""
    con.execute(_script("refresh.sql"))


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
    """Load a bundle directory (any subset of its files), streaming samples in batches."""
    from gpuwatch.store import bundle

    files = bundle.find_files(path)
    small = {}
    for name, file in files.items():
        if name != "samples":
            small[name] = _read_whole(name, file)
    samples = None
    if "samples" in files:
        window = window or _ts_range(files["samples"])
        samples = _sample_batches(files["samples"], progress=progress)
    return _write(con, small, samples, source=str(path), window=window)


def _read_whole(name: str, file: Path):
    import pandas as pd

    from gpuwatch.store import bundle

    parts = list(bundle.batches(file))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=BUNDLE_COLUMNS[name])
    return validate(name, frame, file=str(file))


def _sample_batches(file: Path, *, progress: bool | None) -> Iterable:
    from tqdm import tqdm

    from gpuwatch.store import bundle

    offset = 0
    with tqdm(total=bundle.rows(file), unit="rows", desc="samples", disable=None if progress is None else not progress) as bar:
        for frame in bundle.batches(file):
            yield validate("samples", frame, file=str(file), row_offset=offset)
            offset += len(frame)
            bar.update(len(frame))


def _ts_range(file: Path) -> tuple[datetime, datetime] | None:
    """The samples' first and last timestamp (validated), read from the ts column alone."""
    from gpuwatch.store import bundle

    lo = hi = None
    offset = 0
    for frame in bundle.batches(file, columns=["ts"]):
        if "ts" not in frame.columns:
            raise BundleError(f"{file}: missing required column(s) 'ts'")
        ts = validate("samples", frame.assign(node="-", gpu_uuid="-"), file=str(file), row_offset=offset)["ts"]
        offset += len(frame)
        if len(ts):
            lo = ts.min() if lo is None else min(lo, ts.min())
            hi = ts.max() if hi is None else max(hi, ts.max())
    return None if lo is None else (lo, hi)


def _write(con: Any, small: dict, samples: Iterable | None, *, source: str, window) -> dict[str, int]:
    counts = {name: 0 for name in BUNDLE_COLUMNS}
    con.execute("BEGIN TRANSACTION")
    try:
        for name, frame in small.items():
            counts[name] = _upsert(con, name, frame)
        if samples is not None:
            if window is not None:
                con.execute("DELETE FROM samples WHERE ts >= $lo AND ts <= $hi", {"lo": window[0], "hi": window[1]})
            for frame in samples:
                counts["samples"] += _insert(con, "samples", frame)
        _log(con, source=source, window=window, counts=counts)
        refresh(con)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
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
    """First and last timestamp of the data held (samples, else pod allocations); UTC, naive."""
    first, last = con.execute(_script("range.sql")).fetchone()
    return first, last
