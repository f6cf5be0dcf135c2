"""Where `gpuwatch simulate` streams samples: Parquet row groups, or appended CSV chunks."""

from __future__ import annotations

from pathlib import Path

ROW_GROUP_ROWS = 1_000_000


class ParquetSink:
    def __init__(self, path: Path, schema):
        import pyarrow.parquet as pq

        self.rows = 0
        self.writer = pq.ParquetWriter(str(path), schema, compression="zstd")

    def write(self, table) -> None:
        self.writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
        self.rows += table.num_rows

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.writer.close()


class CsvSink:
    def __init__(self, path: Path):
        self.path, self.rows = path, 0

    def write(self, table) -> None:
        frame = table.to_pandas()
        frame["ts"] = frame["ts"].astype("int64") // 10**9 if frame["ts"].dt.tz is None else (
            frame["ts"].dt.tz_convert("UTC").dt.tz_localize(None).astype("datetime64[s]").astype("int64"))
        frame.to_csv(self.path, mode="a" if self.rows else "w", header=not self.rows, index=False)
        self.rows += len(frame)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass
