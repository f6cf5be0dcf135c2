"""`gpuwatch lake`: put a window of data into hive-partitioned Parquet on S3 or a directory, or get it back.

    gpuwatch lake put --to s3://BUCKET/PREFIX --cluster NAME (--db STORE | --from SOURCE) [--days N | --start/--end]
    gpuwatch lake get --from s3://BUCKET/PREFIX --db STORE [--cluster NAME ...] [--days N | --start/--end]

``--from`` takes whatever ``gpuwatch ingest`` does (bundle DIR, prometheus://, FILE.prom): read
into a scratch store, then put. From Prometheus, Thanos or Mimir the default ``--step 5m`` makes
the samples 5-minute means (the rollup is theirs: avg_over_time). Layout, idempotency and
pruning: docs/lake.md.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, time, timedelta

from gpuwatch import store, units
from gpuwatch.lake import get as reader
from gpuwatch.lake import layout, storage
from gpuwatch.lake import put as writer
from gpuwatch.model import BUNDLE_COLUMNS

ROOT_HELP = "s3://BUCKET[/PREFIX] or a directory"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    put = actions.add_parser("put", help="write a window of a store or an ingest source into the lake",
                             description="write a window of a store or an ingest source into the lake")
    put.add_argument("--to", dest="root", required=True, help=ROOT_HELP)
    put.add_argument("--cluster", required=True, help="the cluster the data comes from (its partition; a DNS label)")
    source = put.add_mutually_exclusive_group(required=True)
    source.add_argument("--db", help="a gpuwatch store: put its raw tables")
    source.add_argument("--from", dest="source", help="bundle DIR, prometheus://host:port or FILE.prom (as ingest)")
    put.add_argument("--step", default="5m", help="Prometheus: query_range step, the rollup (default: %(default)s)")
    put.add_argument("--at", help=".prom file: the scrape's timestamp, ISO-8601 UTC (default: the file's own)")
    put.add_argument("--team-label", default="team", metavar="KEY", help="Prometheus: the pod label naming the team")
    get = actions.add_parser("get", help="load the lake's partitions for a window into a store",
                             description="load the lake's partitions for a window into a store")
    get.add_argument("--from", dest="root", required=True, help=ROOT_HELP)
    get.add_argument("--db", required=True, help="DuckDB store to write (created if missing)")
    get.add_argument("--cluster", action="append", default=[], metavar="NAME",
                     help="a cluster to load (repeatable; default: every cluster in the lake)")
    for sub in (put, get):
        sub.add_argument("--start", help="window start, ISO-8601 UTC (put: default the data's first row)")
        sub.add_argument("--end", help="window end, exclusive, ISO-8601 UTC (default: now; put: the data's last row)")
        sub.add_argument("--days", type=int, metavar="N",
                         help="the window is the N whole UTC days before today (instead of --start/--end)")
        sub.add_argument("--endpoint-url", metavar="URL",
                         help="S3-compatible endpoint, e.g. http://minio.storage:9000 (default: AWS_ENDPOINT_URL_S3, "
                              "AWS_ENDPOINT_URL, else AWS S3)")


def run(args: argparse.Namespace, *, now: datetime | None = None) -> int:
    window = parse_window(args, now=now or datetime.now(UTC).replace(tzinfo=None))
    lake = storage.open_lake(args.root, endpoint_url=args.endpoint_url)
    return run_put(args, lake, window) if args.action == "put" else run_get(args, lake, window)


def parse_window(args: argparse.Namespace, *, now: datetime) -> tuple[datetime, datetime] | None:
    """--days N, or --start/--end (either may be left out), or None (put: the data's own span)."""
    if args.days is not None:
        if args.start or args.end:
            raise units.UsageError("--days: not with --start/--end")
        today = datetime.combine(now.date(), time())
        most = (today - datetime(units.EARLIEST_YEAR, 1, 1)).days
        if not 1 <= args.days <= most:
            raise units.UsageError(f"--days: {args.days} is not a number of days from 1 to {most:,} "
                                   f"(back to {units.EARLIEST_YEAR}-01-01)")
        return today - timedelta(days=args.days), today
    start = units.parse_utc(args.start, what="--start") if args.start else None
    end = units.parse_utc(args.end, what="--end") if args.end else None
    if start is None and end is None:
        return None
    if start is None:
        raise units.UsageError("--start: required with --end")
    window = (start, end or now)
    layout.day_windows(*window)  # refuses an end before the start
    return window


def run_put(args: argparse.Namespace, lake: storage.Lake, window) -> int:
    cluster = layout.check_cluster(args.cluster)
    flags = None if args.db is not None else _source_flags(args, window)  # flags and the store first
    con = store.connect(args.db, read_only=True) if flags is None else None
    what = args.db or args.source
    try:
        storage.check_reachable(lake, create=True)  # then the lake, before a long read of the source
        con = con or _scratch(args.source, flags)
        window = window or writer.data_window(con, what=what)
        written = writer.put(con, lake, cluster=cluster, window=window)
    finally:
        if con is not None:
            con.close()
    print(f"put {what} into {lake.root} as cluster {cluster}, {window[0]:%Y-%m-%dT%H:%M:%SZ} to "
          f"{window[1]:%Y-%m-%dT%H:%M:%SZ}: {len(written.objects)} objects; "
          + ", ".join(f"{k} {v:,}" for k, v in written.rows.items() if v))
    return 0


def _source_flags(args: argparse.Namespace, window) -> dict:
    """``--from`` checked as ingest checks it, and ingest's keyword arguments for it."""
    from gpuwatch.ingest import command as ingest

    ingest.check_source(args.source)
    flags = {"step": units.parse_duration(args.step, what="--step"),
             "at": units.parse_utc(args.at, what="--at") if args.at else None,
             "team_label": ingest.check_label(args.team_label)}
    return flags | ({"start": window[0], "end": window[1]} if window is not None else {})


def _scratch(source: str, flags: dict):
    """An in-memory store holding ``source``, read by gpuwatch ingest's own readers."""
    from gpuwatch.ingest import command as ingest

    con = store.connect(None)
    try:
        ingest.ingest(con, source, **flags)
    except BaseException:
        con.close()
        raise
    return con


def run_get(args: argparse.Namespace, lake: storage.Lake, window) -> int:
    clusters = [layout.check_cluster(c) for c in args.cluster] or None
    storage.check_reachable(lake)
    todo = reader.plan(lake, clusters=clusters, window=window)  # before the store is created or opened
    con = store.connect(args.db)
    try:
        reader.load(con, lake, todo, window=window)
        held = {t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in BUNDLE_COLUMNS}
    finally:
        con.close()
    objects = sum(len(paths) for chunks in todo.values() for c in chunks for paths in c.tables.values())
    print(f"loaded {objects:,} objects of {len(todo)} cluster(s) from {lake.root} into {args.db}; it now holds: "
          + ", ".join(f"{k} {v:,}" for k, v in held.items()))
    return 0
