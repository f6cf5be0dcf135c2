"""Prometheus ingest at fleet scale: how long `gpuwatch ingest --from prometheus://` takes to read a fleet.

    python bench/prometheus_ingest.py                       # 256 GPUs x 1 day, backfilled at 60 s
    python bench/prometheus_ingest.py --gpus 1024 --days 1  # larger (the backfill takes minutes)
    python bench/prometheus_ingest.py --gpus 1024 --days 7 --scrape 300   # the whole 7-day fleet, scraped every 5 min

Simulates the fleet, writes it as OpenMetrics in dcgm-exporter's and kube-state-metrics' names and
backfills it with promtool (bench/promql.py), starts Debian's prometheus on that TSDB, then reads the
whole window with gpuwatch's reader (ingest/prometheus.py: per-field ``query_range``, chunked by time,
sharded by node regex, a few queries in flight) at a 60 s and a 5-minute step, one query at a time
and several, and with more nodes per query. Prints one table:
seconds, queries, sample rows, rows per second, and the 7-day figure extrapolated per GPU (the reader's
cost grows with series x points; a 7-day read is 7 one-day chunks per shard and field).
``--scrape`` is the simulated scrape interval (default 60 s). A 60 s read of a fleet scraped every 5 minutes
is not a 60 s fleet's read: the reader averages each step's own samples (``avg_over_time(x[59.999s])``), so
4 steps in 5 are empty and it returns the 5-minute read's rows while evaluating 5x the steps; measure a 60 s
read on a fleet scraped at 60 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _promql_module():
    spec = importlib.util.spec_from_file_location("bench_promql", ROOT / "bench" / "promql.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read(url: str, *, start: float, end: float, step: float, nodes_per_query: int, concurrency: int) -> dict:
    """One whole-window read by gpuwatch's Prometheus reader: seconds, queries, sample rows."""
    from gpuwatch.ingest import prometheus

    client = prometheus.Client(url)
    began = time.perf_counter()
    frames = prometheus.fetch(url, start=start, end=end, step=step, nodes_per_query=nodes_per_query, client=client,
                              concurrency=concurrency)
    return {"seconds": time.perf_counter() - began, "queries": client.queries, "rows": len(frames["samples"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=256)
    parser.add_argument("--days", type=float, default=1.0)
    parser.add_argument("--scrape", type=float, default=60.0, help="simulated scrape interval, seconds")
    parser.add_argument("--workdir", help="keep the bundle and TSDB here (default: a temporary directory)")
    args = parser.parse_args(argv)
    from gpuwatch.fleet import build_fleet
    from gpuwatch.fleet.command import write_bundle

    promql = _promql_module()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        fleet = build_fleet(gpus=args.gpus, seed=0, days=args.days)
        began = time.perf_counter()
        write_bundle(fleet, work / "bundle", step=args.scrape)
        written = promql.backfill_from_bundle(work / "bundle", work / "tsdb", step=args.scrape)
        backfill = time.perf_counter() - began
        print(f"Prometheus ingest: {args.gpus:,} GPUs x {args.days:g} days, backfilled at {args.scrape:g} s "
              f"({written:,} OpenMetrics samples, simulate + backfill {backfill:.0f} s)\n")
        print(f"{'read':<34}{'seconds':>9}{'queries':>9}{'rows':>12}{'rows/s':>10}{'7 d x 1,024 GPUs (est.)':>26}")
        with promql.prometheus(work / "tsdb") as url:
            for step, per, inflight in ((60.0, 16, 1), (60.0, 16, 4), (300.0, 16, 4), (60.0, 64, 4)):
                got = read(url, start=fleet.start, end=fleet.end, step=step, nodes_per_query=per, concurrency=inflight)
                scale = (7 / args.days) * (1024 / args.gpus)
                print(f"{f'step {step:g} s, {per} nodes/q, {inflight} in flight':<34}{got['seconds']:>9.1f}{got['queries']:>9,}"
                      f"{got['rows']:>12,}{got['rows'] / max(got['seconds'], 1e-9):>10,.0f}"
                      f"{got['seconds'] * scale:>25.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
