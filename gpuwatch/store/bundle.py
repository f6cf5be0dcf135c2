"""Reading a bundle directory (DESIGN §3): Parquet or CSV files, streamed in batches.

A bundle holds any subset of ``devices``, ``samples``, ``pods``, ``prices``, each as
``<name>.parquet``, ``<name>.csv`` (optionally ``.gz``) or a ``<name>/`` directory of Parquet
files (hive partitions allowed). Reading is separate from validation (store.validate, pure).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store.validate import BundleError

BATCH_ROWS = 250_000  # bounds the pandas side of validation; DuckDB inserts are as fast
_SUFFIXES = (".parquet", ".csv", ".csv.gz")


def find_files(path: str | Path) -> dict[str, Path]:
    """Bundle file name -> path, for the files present in ``path`` (a directory)."""
    root = Path(path)
    if not root.is_dir():
        raise BundleError(f"{root}: not a bundle directory")
    found: dict[str, Path] = {}
    for name in BUNDLE_COLUMNS:
        candidates = [root / f"{name}{s}" for s in _SUFFIXES if (root / f"{name}{s}").is_file()]
        if (root / name).is_dir():
            candidates.append(root / name)
        if len(candidates) > 1:
            raise BundleError(f"{root}: {name} is there more than once ({', '.join(c.name for c in candidates)})")
        if candidates:
            found[name] = candidates[0]
    if not found:
        raise BundleError(f"{root}: no bundle files (expected {', '.join(BUNDLE_COLUMNS)} as .parquet or .csv)")
    return found


def rows(path: Path) -> int | None:
    """Row count when cheap to know (Parquet metadata), else None."""
    if path.suffix == ".parquet" or path.is_dir():
        return _dataset(path).count_rows()
    return None


def batches(path: Path, *, columns: list[str] | None = None, batch_rows: int | None = None) -> Iterator:
    """pandas frames of at most ``batch_rows`` rows; CSV values arrive as text (validated later)."""
    import pandas as pd

    batch_rows = batch_rows or BATCH_ROWS
    if path.suffix == ".parquet" or path.is_dir():
        dataset = _dataset(path)
        wanted = columns if columns is None else [c for c in columns if c in dataset.schema.names]
        for batch in dataset.to_batches(columns=wanted, batch_size=batch_rows):
            yield batch.to_pandas()
        return
    try:
        yield from pd.read_csv(path, dtype=str, chunksize=batch_rows, usecols=_usecols(columns))
    except pd.errors.ParserError as exc:
        raise BundleError(f"{path}: not a readable CSV ({exc})") from exc


def _usecols(columns: list[str] | None):
    return None if columns is None else (lambda c: c in columns)


def _dataset(path: Path):
    import pyarrow.dataset as ds

    try:
        return ds.dataset(str(path), format="parquet", partitioning="hive")
    except Exception as exc:  # pyarrow raises several types for unreadable files
        raise BundleError(f"{path}: not a readable Parquet file or directory ({exc})") from exc
