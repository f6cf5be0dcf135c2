"""Reading a bundle directory (docs/architecture.md#data-contract): Parquet or CSV files, as DuckDB relations.

A bundle holds any subset of ``devices``, ``samples``, ``pods``, ``prices``, each as
``<name>.parquet``, ``<name>.csv`` (optionally ``.gz``) or a ``<name>/`` directory of Parquet
files (hive partitions allowed). Parquet is read by DuckDB itself (one relation, every file);
CSV is streamed in batches by pyarrow as text (never all in memory). Every relation carries
columns.FILE and columns.ROW (1-based data row in that file) so a bad value can be named.
Checking and typing is store.columns' job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.store.columns import FILE, ROW
from gpuwatch.store.validate import BundleError

BATCH_ROWS = 1_000_000  # CSV rows per batch: bounds memory; DuckDB checks and inserts each batch
GROUND_TRUTH = ("truth", "failures")  # what `gpuwatch simulate` writes beside a bundle; never loaded
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
    _refuse_unknown(root)
    if not found:
        raise BundleError(f"{root}: no bundle files (expected {', '.join(BUNDLE_COLUMNS)} as .parquet or .csv)")
    return found


def _refuse_unknown(root: Path) -> None:
    """A data file that is not a bundle table is an error listing it, never silently skipped: a
    misnamed file (``sample.csv``) would otherwise load as a bundle without its samples. The
    simulator's ground truth (truth.csv, failures.csv), written beside its bundle, is the expected extra."""
    known = {f"{n}{s}" for n in (*BUNDLE_COLUMNS, *GROUND_TRUTH) for s in _SUFFIXES}
    unknown = sorted(p.name for p in root.iterdir() if p.name.endswith(_SUFFIXES) and p.name not in known)
    if unknown:
        raise BundleError(f"{root}: not bundle files: {', '.join(unknown)} (bundle files: "
                          f"{', '.join(BUNDLE_COLUMNS)} as .parquet, .csv or .csv.gz; move the others away)")


# pandas' default NA strings, so CSV bundles read as they always have
_NA = ["", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>", "N/A",
       "NA", "NULL", "NaN", "None", "n/a", "nan", "null"]

# A part of a file: opens itself on a connection as a view, returns (view name, column -> DuckDB type).
Part = Callable[..., tuple[str, dict[str, str]]]


def parts(path: Path, *, columns: list[str] | None = None) -> Iterator[Part]:
    """The file as views: one for Parquet (all files of a directory), one per batch for CSV."""
    if path.suffix == ".parquet" or path.is_dir():
        yield lambda con: _parquet_view(con, path)
        return
    for batch in _csv_batches(path, columns=columns):
        yield lambda con, batch=batch: _arrow_view(con, batch)


def _parquet_files(path: Path) -> list[str]:
    files = [str(path.resolve())] if path.is_file() else sorted(str(p.resolve()) for p in path.rglob("*.parquet"))
    if not files:
        raise BundleError(f"{path}: no Parquet files")
    return files


def parquet_source(path: Path) -> str:
    """A read_parquet() call over the file(s), for a persistent view (store.link_bundle). The paths are
    the only values written into SQL: a view cannot hold bound parameters; quotes are doubled."""
    listed = ", ".join("'" + f.replace("'", "''") + "'" for f in _parquet_files(path))
    return f"read_parquet([{listed}], hive_partitioning = {str(path.is_dir()).lower()}, union_by_name = true)"


def _parquet_view(con, path: Path) -> tuple[str, dict[str, str]]:
    files = _parquet_files(path)
    try:
        relation = con.read_parquet(files, file_row_number=True, filename=True, hive_partitioning=path.is_dir(),
                                    union_by_name=True)
        # a temporary view: a persistent one would stay in the store, naming files that may be gone
        con.execute(f"CREATE OR REPLACE TEMP VIEW bundle_file AS {relation.sql_query()}")
    except Exception as exc:  # duckdb raises several types for unreadable files
        raise BundleError(f"{path}: not a readable Parquet file or directory ({exc})") from exc
    con.execute(f"CREATE OR REPLACE TEMP VIEW bundle_part AS SELECT * EXCLUDE (file_row_number, filename), "
                f"filename AS {FILE}, file_row_number + 1 AS {ROW} FROM bundle_file")
    return "bundle_part", _types(con, "bundle_part")


def _arrow_view(con, batch) -> tuple[str, dict[str, str]]:
    con.execute("DROP VIEW IF EXISTS bundle_part")  # a Parquet part's view, or the previous batch
    con.register("bundle_part", batch)
    return "bundle_part", _types(con, "bundle_part")


def _types(con, view: str) -> dict[str, str]:
    return {row[0]: row[1] for row in con.execute(f"DESCRIBE {view}").fetchall()}


def _csv_batches(path: Path, *, columns: list[str] | None) -> Iterator:
    """pyarrow tables of text columns plus FILE and ROW, ``BATCH_ROWS`` rows at a time."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.csv as pacsv

    try:
        names = pacsv.open_csv(pa.input_stream(str(path), compression="detect")).schema.names
        wanted = names if columns is None else [c for c in names if c in columns]
        reader = pacsv.open_csv(pa.input_stream(str(path), compression="detect"),
                                read_options=pacsv.ReadOptions(block_size=32 << 20),
                                convert_options=pacsv.ConvertOptions(
                                    column_types={n: pa.string() for n in names}, include_columns=wanted,
                                    strings_can_be_null=True, null_values=_NA))
        offset = 0
        for batch in reader:
            for start in range(0, batch.num_rows, BATCH_ROWS):
                piece = pa.Table.from_batches([batch.slice(start, BATCH_ROWS)])
                yield _numbered(piece, path, offset, np, pa)
                offset += piece.num_rows
        if offset == 0:
            yield _numbered(reader.schema.empty_table(), path, 0, np, pa)
    except (pa.ArrowInvalid, OSError, EOFError) as exc:  # also a truncated or corrupt .csv.gz
        raise BundleError(f"{path}: not a readable CSV ({exc})") from exc


def _numbered(table, path: Path, offset: int, np, pa):
    n = table.num_rows
    files = pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array([str(path)]))
    return table.append_column(FILE, files).append_column(ROW, pa.array(np.arange(offset + 1, offset + n + 1)))
