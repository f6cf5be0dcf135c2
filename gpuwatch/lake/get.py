"""Reading the lake back into a store: only the partitions a window needs (docs/lake.md#pruning).

The clusters and days to read are chosen from the names before any object is opened (a LIST per
table and day of the window, or one per table of the cluster's prefix), and only those objects are
fetched. Consecutive days of a cluster, up to LOAD_BYTES of Parquet, are one ``store.load`` (a
transaction, bounded memory): pyarrow reads the objects, DuckDB scans them with the window pushed
down (row groups outside it are skipped) and, where a row can be in several objects, keeps it from
the object whose window ends last, then from the newest put (layout.dedupe_key: a pod's latest day,
an overlapping put's later window, a re-put of part of a day). Nodes and namespaces are qualified
with the cluster, as ``gpuwatch ingest --cluster`` does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from gpuwatch import store, units
from gpuwatch.lake import layout, storage
from gpuwatch.model import BUNDLE_COLUMNS

LOAD_BYTES = 16 << 20  # Parquet bytes per store.load: consecutive days are loaded together up to this


@dataclass
class Chunk:
    """Consecutive days of one cluster loaded in one transaction: table -> object paths, and their bytes."""

    days: list[date]
    tables: dict[str, list[str]] = field(default_factory=dict)
    size: int = 0
    overlapping: set[str] = field(default_factory=set)  # tables with a day of several objects


Plan = dict[str, list[Chunk]]  # cluster -> its chunks, in day order


def get(con: Any, lake: storage.Lake, *, clusters: list[str] | None = None,
        window: tuple[datetime, datetime] | None = None) -> dict[str, int]:
    """Load ``clusters`` (default: every cluster in the lake) for ``window`` [start, end) (default:
    everything) into the store ``con``; rows per table."""
    storage.check_reachable(lake)
    return load(con, lake, plan(lake, clusters=clusters, window=window), window=window)


def load(con: Any, lake: storage.Lake, todo: Plan, *, window: tuple[datetime, datetime] | None) -> dict[str, int]:
    """Load a ``plan``: one store.load per chunk; rows per table."""
    counts = dict.fromkeys(BUNDLE_COLUMNS, 0)
    for cluster, chunks in todo.items():
        for chunk in chunks:
            frames = {table: read(con, lake, table, paths, window=window, dedupe=dedupe(chunk, table))
                      for table, paths in chunk.tables.items()}
            days = f"{chunk.days[0]}" + (f"..{chunk.days[-1]}" if len(chunk.days) > 1 else "")
            loaded = store.load(con, frames, source=f"{lake.root} cluster={cluster} date={days}",
                                window=_clip(window, chunk.days), cluster=cluster)
            for table, rows in loaded.items():
                counts[table] += rows
    return counts


def plan(lake: storage.Lake, *, clusters: list[str] | None, window: tuple[datetime, datetime] | None,
         load_bytes: int = LOAD_BYTES) -> Plan:
    """The objects to read, listed partition by partition, in chunks of about ``load_bytes``; a
    DataError when a cluster has none."""
    names = clusters or sorted({c for t in BUNDLE_COLUMNS for c in storage.list_clusters(lake, t)})
    if not names:
        raise units.DataError(f"{lake.root}: no lake partitions here (nothing put yet?)")
    todo: Plan = {}
    for cluster in names:
        listed = {t: storage.list_parts(lake, t, cluster, layout.days(*window) if window else None)
                  for t in BUNDLE_COLUMNS}
        chunks: list[Chunk] = []
        for day in sorted({d for per_day in listed.values() for d in per_day}):
            found = {t: per_day[day] for t, per_day in listed.items() if day in per_day}
            size = sum(n for parts in found.values() for _, n in parts)
            if not chunks or chunks[-1].size + size > load_bytes:
                chunks.append(Chunk([]))
            chunk = chunks[-1]
            chunk.days.append(day)
            chunk.size += size
            for table, parts in found.items():
                chunk.tables.setdefault(table, []).extend(path for path, _ in parts)
                if len(parts) > 1:
                    chunk.overlapping.add(table)
        if not chunks:
            span = f" between {window[0]:%Y-%m-%dT%H:%M:%SZ} and {window[1]:%Y-%m-%dT%H:%M:%SZ}" if window else ""
            raise units.DataError(f"{lake.root}: nothing for cluster {cluster}{span}")
        todo[cluster] = chunks
    return todo


def dedupe(chunk: Chunk, table: str) -> bool:
    """Whether a row of ``table`` may be in several of the chunk's objects: a snapshot table's of
    several days, or a time table's where one day holds objects of overlapping windows."""
    several = len(chunk.tables[table]) > 1
    return several if table in layout.SNAPSHOT_TABLES else table in chunk.overlapping


def read(con: Any, lake: storage.Lake, table: str, paths: list[str], *,
         window: tuple[datetime, datetime] | None, dedupe: bool = True):
    """One table's rows from ``paths`` as a DataFrame in the bundle's columns (Arrow-backed: no
    copy on the way in or out of DuckDB); ``dedupe``: keep each row of the latest window only."""
    import duckdb
    import pandas as pd

    source = dataset(lake, table, paths, schema=_schema(con, table))
    view = f"lake_{table}"
    con.register(view, source)
    try:
        sql, params = _query(table, view, window=window, dedupe=dedupe)
        return con.sql(sql, params=params).to_arrow_table().to_pandas(types_mapper=pd.ArrowDtype)
    except duckdb.Error as exc:
        raise diagnose(lake, table, paths, schema=_schema(con, table), error=exc) from None
    finally:
        con.unregister(view)


def _query(table: str, view: str, *, window, dedupe: bool) -> tuple[str, dict]:
    sql = f"SELECT {', '.join(BUNDLE_COLUMNS[table])} FROM {view}"
    params = {}
    if window is not None and table in layout.TIME_TABLES:
        sql += " WHERE ts >= $lo AND (ts < $hi OR ts = $lo)"
        params = {"lo": window[0], "hi": window[1]}
    if dedupe:  # a row in several objects: keep it from the one whose window ends last, then the newest
        _, hi, at = layout.WINDOW_COLUMNS
        sql += (f" QUALIFY dense_rank() OVER (PARTITION BY {', '.join(layout.dedupe_key(table))} "
                f"ORDER BY {hi} DESC, {at} DESC) = 1")
    return sql, params


def dataset(lake: storage.Lake, table: str, paths: list[str] | None = None, *, schema=None):
    """A pyarrow Dataset over ``paths`` (default: every object of ``table``), hive-partitioned by
    cluster and date: register it in DuckDB and filters on ``cluster``/``date`` prune whole objects."""
    import pyarrow as pa
    import pyarrow.dataset as ds

    partitioning = ds.partitioning(pa.schema([("cluster", pa.string()), ("date", pa.date32())]), flavor="hive")
    with storage.errors(lake.root, what=f"opening {table}"):
        if paths is None:
            return ds.dataset(layout.table_dir(lake.base, table), filesystem=lake.fs, format="parquet",
                              partitioning=partitioning, ignore_prefixes=[".", "_"])
        return ds.dataset(paths, filesystem=lake.fs, format="parquet", schema=schema, partitioning=partitioning,
                          partition_base_dir=layout.table_dir(lake.base, table))


def diagnose(lake: storage.Lake, table: str, paths: list[str], *, schema, error: Exception) -> units.DataError:
    """The scan failed: read the objects one by one and name the first that cannot be read as
    ``table`` (a storage error, a broken file, a column of the wrong type)."""
    import pyarrow.dataset as ds

    for path in paths:
        try:
            ds.dataset(path, filesystem=lake.fs, format="parquet", schema=schema).to_table()
        except OSError as exc:
            return units.DataError(storage.describe(lake.root, exc, what=path))
        except Exception as exc:  # pyarrow's cast and type errors: the object does not fit the table
            return units.DataError(f"{lake.root}: {path}: not a {table} object ({' '.join(str(exc).split())[:300]})")
    return units.DataError(f"{lake.root}: {table}: {' '.join(str(error).split())[:300]}")


def _schema(con: Any, table: str):
    """The Arrow schema a lake object of ``table`` is read as: the store's column types, then the window."""
    import pyarrow as pa

    schema = con.sql(f"SELECT {', '.join(BUNDLE_COLUMNS[table])} FROM {table} LIMIT 0").to_arrow_table().schema
    for name in layout.WINDOW_COLUMNS:
        schema = schema.append(pa.field(name, pa.timestamp("us")))
    return schema


def _clip(window: tuple[datetime, datetime] | None, days: list[date]) -> tuple[datetime, datetime] | None:
    """The part of ``window`` inside ``days`` (None: the load takes its window from the samples)."""
    if window is None:
        return None
    inside = [w for w in layout.day_windows(*window) if days[0] <= w.day <= days[-1]]
    return (inside[0].start, inside[-1].end) if inside else None
