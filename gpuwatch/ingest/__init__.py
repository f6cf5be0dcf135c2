"""The analyzer's ingest: everything that turns outside data into bundle tables in the store.

Readers, one per format: ``prometheus`` (the HTTP API), ``promfile`` (a saved ``/metrics`` page),
bundle directories (Parquet/CSV, checked in DuckDB), and ``openmetrics`` (the writer that turns a
fleet into OpenMetrics text for ``promtool`` backfills). ``series`` and ``promframes`` are the pure
core the two Prometheus readers share. ``command`` is ``gpuwatch ingest``. Nothing on the node side
imports this package.
"""
