"""The chart's analyzer step: `gpuwatch ingest` + `gpuwatch analyze` into a copy, then publish it.

The app, report and export-derived keep the DuckDB file open read-only, and DuckDB admits no writer
while any other process has the file open. So each run copies the published file, ingests and
analyzes into the copy, and renames it over the published one: rename is atomic, readers keep the
version they opened until they reopen (the app reopens when the file's mtime changes), and a
failed run leaves the last good file in place. Stdlib only; runs in the gpuwatch image.

    python analyzer.py --db /data/gpuwatch.duckdb [--every 15m] [--overlap 1h] -- INGEST_ARGS -- ANALYZE_ARGS

Once a published file exists, ingest is incremental: `--start` = now - overlap (re-ingesting a
window replaces it, so the overlap only repairs late or missing samples); the first run
backfills ingest's default window.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import subprocess
import sys
import time


def run_once(db: str, ingest: list[str], analyze: list[str], *, gpuwatch: list[str],
             overlap_s: float = 0, now: dt.datetime | None = None) -> int:
    """One ingest + analyze into ``<db>.next``, then an atomic rename onto ``db``; 0 on success."""
    work = db + ".next"
    for stale in (work, work + ".wal"):
        if os.path.exists(stale):
            os.remove(stale)
    if os.path.exists(db):
        shutil.copyfile(db, work)
        ingest = incremental(ingest, overlap_s=overlap_s, now=now or dt.datetime.now(dt.UTC))
    for step, extra in (("ingest", ingest), ("analyze", analyze)):
        argv = [*gpuwatch, step, *extra, "--db", work]
        print("analyzer: running", " ".join(argv), flush=True)
        code = subprocess.call(argv)
        if code:
            print(f"analyzer: `gpuwatch {step}` exited {code}; {db} left as it was", file=sys.stderr, flush=True)
            return code
    os.replace(work, db)
    print(f"analyzer: published {db}", flush=True)
    return 0


def incremental(ingest: list[str], *, overlap_s: float, now: dt.datetime) -> list[str]:
    """``ingest`` plus ``--start now-overlap`` unless disabled (0) or the user gave --start."""
    if overlap_s <= 0 or any(a == "--start" or a.startswith("--start=") for a in ingest):
        return ingest
    start = (now - dt.timedelta(seconds=overlap_s)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return [*ingest, "--start", start]


def split_args(rest: list[str]) -> tuple[list[str], list[str]]:
    """``-- INGEST -- ANALYZE`` (either part may be empty) -> (ingest args, analyze args)."""
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if "--" in rest:
        cut = rest.index("--")
        return rest[:cut], rest[cut + 1:]
    return rest, []


def seconds(text: str) -> float:
    """``900``, ``90s``, ``15m`` or ``1h`` -> seconds."""
    text = str(text).strip()
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1:])
    try:
        return float(text[:-1]) * scale if scale else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 900, 15m, 1h)") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="published DuckDB file")
    parser.add_argument("--every", type=seconds, default=0, help="pause between runs (900, 15m); 0 = run once (default)")
    parser.add_argument("--overlap", type=seconds, default=3600,
                        help="incremental ingest re-reads this much before now (default: 1h; 0 = full window)")
    parser.add_argument("--gpuwatch", default="gpuwatch", help="the gpuwatch command (default: %(default)s)")
    args, rest = parser.parse_known_args(argv)
    ingest, analyze = split_args(rest)
    command = args.gpuwatch.split()
    while True:
        code = run_once(args.db, ingest, analyze, gpuwatch=command, overlap_s=args.overlap)
        if args.every <= 0:
            return code
        # a loop never exits on a failed run: the next one may succeed (Prometheus back up)
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
