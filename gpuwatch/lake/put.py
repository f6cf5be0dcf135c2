"""Writing a window of a store's raw tables into the lake: one Parquet object per table, cluster and
UTC day (layout.py), each built whole in memory and then written in one piece (storage.py).

The rows are the store's, as the bundle contract types them (model.BUNDLE_COLUMNS), plus the
object's window and put time (layout.WINDOW_COLUMNS). Names are left as the store holds them: the
cluster is the partition, and ``get`` qualifies nodes and namespaces with it; a store name qualified
with another cluster is refused before anything is written (check_names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuwatch import units
from gpuwatch.lake import layout, storage
from gpuwatch.model import BUNDLE_COLUMNS

BATCH_ROWS = 1 << 17  # rows per Arrow batch and Parquet row group: a sub-day window skips the others
COMPRESSION = "zstd"
END_PAST_LAST = timedelta(seconds=1)  # a window taken from the data ends just after its last row
_IN_WINDOW = "ts >= $lo AND (ts < $hi OR ts = $lo)"  # [lo, hi), or the point lo when lo == hi
# the pods that ran in the window (a pod's row holds its whole life: start and end)
_PODS_IN_WINDOW = "(start_ts IS NULL OR start_ts < $hi OR start_ts = $lo) AND (end_ts IS NULL OR end_ts >= $lo)"


@dataclass
class Written:
    """What a put wrote: rows per table, and the object paths."""

    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BUNDLE_COLUMNS, 0))
    objects: list[str] = field(default_factory=list)


def put(con: Any, lake: storage.Lake, *, cluster: str, window: tuple[datetime, datetime],
        now: datetime | None = None) -> Written:
    """Write the store's rows in ``window`` [start, end) under ``cluster``; an object per table and
    day that has rows (re-putting a window overwrites the same objects). A day without a timestamped
    row is skipped whole: nothing happened there, so it gets no snapshot either. ``now``: the put time."""
    layout.check_cluster(cluster)
    check_names(con, cluster)
    written, at = Written(), now or datetime.now(UTC).replace(tzinfo=None)
    for day in layout.day_windows(*window):
        parts = {table: parquet(con, table, day, at=at) for table in layout.TIME_TABLES}
        if not any(rows for _, rows in parts.values()):
            continue
        parts |= {table: parquet(con, table, day, at=at) for table in layout.SNAPSHOT_TABLES}
        for table, (data, rows) in parts.items():
            if rows:
                path = f"{layout.partition_dir(lake.base, table, cluster, day.day)}/{layout.part_name(table, cluster, day)}"
                storage.write_object(lake, path, data)
                written.rows[table] += rows
                written.objects.append(path)
    return written


def check_names(con: Any, cluster: str) -> None:
    """The store's names may carry only ``cluster`` (store.QUALIFIED columns): a name qualified with
    another one (a store holding several clusters) is a DataError before anything is written, since
    ``get`` would refuse those objects (the partition decides the cluster)."""
    from gpuwatch.store.load import QUALIFIED

    for table, names in QUALIFIED.items():
        source = "sample_keys" if table == "samples" else table  # the samples' names, without their readings
        for column in names:
            found = con.execute(f"SELECT {column} FROM {source} WHERE contains({column}, '/') "
                                f"AND NOT starts_with({column}, $c || '/') LIMIT 1", {"c": cluster}).fetchall()
            if found:
                raise units.DataError(f"the store's {table}.{column} holds {found[0][0]!r}, a name of cluster "
                                      f"{found[0][0].split('/', 1)[0]!r}: a put under --cluster {cluster} may carry "
                                      "only its own names (put each cluster's data under its own name)")


def parquet(con: Any, table: str, day: layout.DayWindow, *, at: datetime):
    """(Parquet bytes, rows) of ``table``'s rows for one day window, put at ``at``; sorted."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    reader = con.sql(select(table), params={"lo": day.start, "hi": day.end, "at": at}).to_arrow_reader(BATCH_ROWS)
    sink, rows = pa.BufferOutputStream(), 0
    with pq.ParquetWriter(sink, reader.schema, compression=COMPRESSION) as writer:
        for batch in reader:
            if batch.num_rows:
                writer.write_batch(batch, row_group_size=BATCH_ROWS)
                rows += batch.num_rows
    return sink.getvalue(), rows


def select(table: str) -> str:
    """The query for one table's rows in a day window ($lo, $hi) put at $at, with those as columns."""
    where = _IN_WINDOW if table in layout.TIME_TABLES else _PODS_IN_WINDOW if table == "pods" else "TRUE"
    lo, hi, at = layout.WINDOW_COLUMNS
    return (f"SELECT {', '.join(BUNDLE_COLUMNS[table])}, CAST($lo AS TIMESTAMP) AS {lo}, "
            f"CAST($hi AS TIMESTAMP) AS {hi}, CAST($at AS TIMESTAMP) AS {at} FROM {table} WHERE {where} ORDER BY ALL")


def data_window(con: Any, *, what: str) -> tuple[datetime, datetime]:
    """[first ts, last ts + 1 s) over the store's time tables; a UsageError when it holds none."""
    spans = " UNION ALL ".join(f"SELECT min(ts) AS lo, max(ts) AS hi FROM {t}" for t in layout.TIME_TABLES)
    lo, hi = con.execute(f"SELECT min(lo), max(hi) FROM ({spans})").fetchall()[0]
    if lo is None:
        raise units.UsageError(f"--start/--end: {what} holds no timestamped rows; give the window to put")
    return lo, hi + END_PAST_LAST
