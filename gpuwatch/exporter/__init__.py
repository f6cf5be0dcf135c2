"""The node exporter (``gpuwatch export``): dcgm-exporter-compatible /metrics plus /healthz.

- ``metrics.METRICS``: the declarative table of every series (name, type, help, labels, DCGM id).
- ``collector.ExporterCollector``: per-scrape custom collector over a source and the kubelet.
- ``collector.render_at(fleet, t)``: the exposition of the simulated fleet at time ``t``
  (for golden tests); ``collector.families_at`` the same as metric families.
- ``backfill.write_openmetrics(path, fleet, times, node=)``: many instants as one OpenMetrics file
  for ``promtool tsdb create-blocks-from openmetrics``.
- ``server.serve``: the HTTP server; ``command``: the CLI.
"""
