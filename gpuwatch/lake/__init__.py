"""The lake: bundle tables as hive-partitioned Parquet on object storage or a directory (docs/lake.md).

``<root>/<table>/cluster=<name>/date=<YYYY-MM-DD>/part-<digest>.parquet``. ``put`` writes a window
of a store's raw tables (or of any ingest source, through a scratch store), one object per table,
cluster and UTC day, named by a digest of what it holds, so writing the same window again
replaces the same objects; nothing is ever deleted. ``get`` reads only the objects of the days a
window touches back into a store. ``layout`` is the pure naming, ``storage`` the one module that
talks to S3 or the file system (pyarrow.fs), ``command`` is ``gpuwatch lake``.
"""
