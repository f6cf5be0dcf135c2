"""`gpuwatch ingest`: load a bundle directory, a Prometheus server or a saved /metrics file into DuckDB.

Idempotent per window: re-ingesting a window replaces its samples. Prometheus (`prometheus://`)
and .prom files are read by gpuwatch.sources (imported only when used).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwatch import store
from gpuwatch.ingest import prometheus, promfile


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True,
                        help="bundle DIR, prometheus://host:port, or FILE.prom (a saved /metrics page)")
    parser.add_argument("--db", required=True, help="DuckDB store to write (created if missing)")
    parser.add_argument("--start", help="Prometheus: window start, ISO-8601 UTC (default: --end minus 7 days)")
    parser.add_argument("--end", help="Prometheus: window end, ISO-8601 UTC (default: now)")
    parser.add_argument("--step", default="60s", help="Prometheus: query_range step (default: %(default)s)")
    parser.add_argument("--at", help=".prom file: the scrape's timestamp, ISO-8601 UTC (default: the file's own)")
    parser.add_argument("--link", action="store_true",
                        help="bundle DIR with Parquet samples: query the Parquet files where they are instead of "
                             "copying them (large fleets; the files must stay there)")


def run(args: argparse.Namespace) -> int:
    con = store.connect(args.db)
    try:
        if args.link:
            counts = store.link_bundle(con, args.source)
        else:
            counts = ingest(con, args.source, start=args.start, end=args.end, step=args.step, at=args.at)
    except store.BundleError as exc:
        print(f"gpuwatch ingest: {exc}")
        return 1
    print(f"loaded into {args.db}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    return 0


def ingest(con: Any, source: str, *, start: str | None = None, end: str | None = None, step: str = "60s",
           at: str | None = None, now: datetime | None = None) -> dict[str, int]:
    """Load ``source`` (bundle dir, prometheus:// URL or .prom file); returns rows per table."""
    if source.startswith(("prometheus://", "http://", "https://")):

        end_at = _time(end) if end else (now or datetime.now(UTC)).replace(tzinfo=None)
        start_at = _time(start) if start else end_at - timedelta(days=7)
        frames = prometheus.fetch(source, start=start_at, end=end_at, step=_seconds(step))
        return store.load(con, frames, source=source, window=(start_at, end_at))
    path = Path(source)
    if path.is_file() and path.suffix in (".prom", ".txt", ".metrics"):

        frames = promfile.read_file(path, at=_time(at) if at else None)
        return store.load(con, frames, source=str(path))
    return store.load_bundle(con, path, progress=None)


def _time(text: str) -> datetime:
    stamp = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return stamp.astimezone(UTC).replace(tzinfo=None) if stamp.tzinfo else stamp


def _seconds(text: str) -> float:
    """``"60s"``, ``"5m"``, ``"1h"`` or plain seconds -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)
    except ValueError as exc:
        raise store.BundleError(f"bad --step {text!r}: seconds, or a number with s, m or h") from exc
