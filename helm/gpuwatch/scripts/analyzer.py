"""The chart's analyzer step: `gpuwatch ingest` + `gpuwatch analyze` into a copy, then publish it.

The app, report and export-derived keep the DuckDB file open read-only, and DuckDB admits no writer
while any other process has the file open. So each run copies the published file, ingests and
analyzes into the copy, and renames it over the published one: rename is atomic, readers keep the
version they opened until they reopen (the app reopens when the file's mtime changes), and a
failed run leaves the last good file in place. Stdlib only; runs in the gpuwatch image.

    python analyzer.py --db /data/gpuwatch.duckdb [--every 15m] [--overlap 10m] -- INGEST_ARGS -- ANALYZE_ARGS

From Prometheus, ingest is incremental: `gpuwatch ingest --since-last --tail OVERLAP` reads from the
store's last complete step, less the overlap (re-read, so late scrapes and Prometheus restarts are
repaired; a re-read replaces what it carries, never adds to it), to now. The first run, with no
published file yet, backfills ingest's default window. `--overlap 0`, or a --start or --since-last
among the ingest flags, turns this off.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time


def run_once(db: str, ingest: list[str], analyze: list[str], *, gpuwatch: list[str], overlap_s: float = 0) -> int:
    """One ingest + analyze into ``<db>.next``, then an atomic rename onto ``db``; 0 on success."""
    work = db + ".next"
    for stale in (work, work + ".wal"):
        if os.path.exists(stale):
            os.remove(stale)
    if os.path.exists(db):
        shutil.copyfile(db, work)
    ingest = incremental(ingest, overlap_s=overlap_s)
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


def incremental(ingest: list[str], *, overlap_s: float) -> list[str]:
    """``ingest`` plus ``--since-last --tail OVERLAP`` for a Prometheus source, unless disabled (0) or
    the user gave --start or --since-last (a bundle or file is re-read whole: a reload replaces it)."""
    given = {a.split("=", 1)[0] for a in ingest}
    if overlap_s <= 0 or given & {"--start", "--since-last", "--follow"} or not _from_prometheus(ingest):
        return ingest
    return [*ingest, "--since-last", "--tail", f"{overlap_s:.3f}".rstrip("0").rstrip(".") + "s"]


def _from_prometheus(ingest: list[str]) -> bool:
    """The --from among ``ingest`` is a Prometheus URL."""
    sources = [ingest[i + 1] for i, a in enumerate(ingest[:-1]) if a == "--from"]
    sources += [a.split("=", 1)[1] for a in ingest if a.startswith("--from=")]
    return any(s.startswith(("prometheus://", "http://", "https://")) for s in sources)


def split_args(rest: list[str]) -> tuple[list[str], list[str]]:
    """``-- INGEST -- ANALYZE`` (either part may be empty) -> (ingest args, analyze args)."""
    if rest[:1] == ["--"]:
        rest = rest[1:]
    if "--" in rest:
        cut = rest.index("--")
        return rest[:cut], rest[cut + 1:]
    return rest, []


def seconds(text: str) -> float:
    """``900``, ``90s``, ``15m``, ``1h``, ``1h30m`` or ``500ms`` (the chart schema's durations) -> seconds."""
    text = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 900, 15m, 1h)")
    return sum(float(n) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[u] for n, u in parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="published DuckDB file")
    parser.add_argument("--every", type=seconds, default=0, help="pause between runs (900, 15m); 0 = run once (default)")
    parser.add_argument("--overlap", type=seconds, default=600,
                        help="from Prometheus, each run re-reads this much of the stored data and what is new "
                             "(ingest --since-last --tail; default: 10m; 0 = ingest's full default window)")
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
