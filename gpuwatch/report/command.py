"""`gpuwatch report weekly`: the weekly chargeback report (HTML for the fleet and each team + CSV)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gpuwatch import __version__, analyses, store, units
from gpuwatch.analyses import params as analysis_params
from gpuwatch.report import isoweek as weeks
from gpuwatch.report import weekly


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="report", metavar="REPORT", required=True)
    week_parser = sub.add_parser("weekly", help="one ISO week: fleet.html, team-*.html, chargeback.csv",
                            description="Weekly chargeback report for an ISO week (self-contained HTML + CSV).")
    week_parser.add_argument("--db", required=True, help="DuckDB file written by `gpuwatch ingest` (opened read-only)")
    week_parser.add_argument("--week", help="ISO week like 2026-W47 (default: the last complete week in the data)")
    week_parser.add_argument("--out", required=True, type=Path, help="directory to write the report into")
    week_parser.add_argument("--group-by", default="", metavar="LABEL",
                             help="also show spend by this pod label (e.g. cost_center), and split chargeback.csv "
                                  "rows by it (column group_value)")
    week_parser.add_argument("--min-coverage", default=str(weekly.MIN_COVERAGE), metavar="RATIO",
                        help="refuse a week whose samples cover less than this share (0-1) of the fleet's "
                             "GPU-hours (default: %(default)s; below 0.95 the report is marked as thin)")


def run(args: argparse.Namespace) -> int:
    """Gather, render and write; errors name the problem and exit 2 (a flag) or 1 (the data)."""
    try:  # a bad --week is refused before the store is opened
        chosen = weeks.parse(args.week) if args.week else None
    except ValueError as err:
        raise units.UsageError(f"--week: {err}") from None
    minimum = _ratio(args.min_coverage, flag="--min-coverage")
    group_by = analysis_params.label_key(args.group_by, what="--group-by")
    if not os.path.isfile(args.db):
        print(f"gpuwatch report: no database at {args.db!r} (create one with `gpuwatch ingest`)", file=sys.stderr)
        return 2
    con = store.connect(args.db, read_only=True)
    coverage = analyses.run(con, "data_coverage")
    if coverage.empty or coverage["first_ts"].isna().all():
        print(f"gpuwatch report: {args.db!r} holds no samples; nothing to report", file=sys.stderr)
        return 2
    try:
        week, complete = (chosen, True) if chosen else weekly.default_week(coverage)
    except ValueError as err:
        print(f"gpuwatch report: {err}", file=sys.stderr)
        return 2
    data = weekly.gather(con, week, db_name=os.path.basename(args.db), complete=complete, coverage=coverage,
                         group_by=group_by)
    sampled = data.coverage["sampled"]
    if sampled < minimum:
        raise units.DataError(f"{week.label}: samples cover {sampled:.1%} of the fleet's GPU-hours, below --min-coverage "
                              f"{minimum:g}: not billing a week without enough data (pick another --week)")
    written = weekly.write(data, args.out, version=__version__)
    note = "" if complete else " (partial week: the data does not cover a whole ISO week)"
    thin = f"; thin data: samples cover {sampled:.1%} of the fleet's GPU-hours" if sampled < weekly.WELL_COVERED else ""
    print(f"wrote {len(written)} files for {week.label}{note} to {args.out}{thin}")
    return 0


def _ratio(text: str, *, flag: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value <= 1.0:
        raise units.UsageError(f"{flag}: {text!r} is not a ratio 0-1")
    return value
