"""Benchmark: each app page's first (cold-cache) render and the weekly report, on 64 and 1,024 GPUs x 7 days.

    .venv/bin/python bench/app.py [--gpus 64 1024] [--days 7] [--cache /tmp/gpuwatch-bench] [--repeat 3]

Builds each store once with the real commands (``gpuwatch simulate`` then ``gpuwatch ingest``)
and caches it under --cache, plus a copy in which the analyze step has persisted the default
window's analyses (``analyses.persist``), so both read paths are timed side by side: computing
from the samples, and reading persisted results. A page's render is timed with
streamlit.testing.v1.AppTest with every Streamlit cache cleared first, so it includes the
sidebar's queries and every analysis the page runs (the server's imports and DB connection are
warmed up first). Best of --repeat. Budgets: 2 s per page, 20 s per weekly report (fleet + every
team + CSV). Prints one table and the machine's load average (other processes skew timings).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("fleet", "idle_hoarding", "false_utilization", "mig", "chargeback", "recommendations", "reclaim_audit")
PAGE_BUDGET_S, REPORT_BUDGET_S = 2.0, 20.0
START = "1794182400"  # 2026-11-09T00:00Z, a Monday, as sample_data: the report gets a complete ISO week


def store(gpus: int, days: float, cache: Path) -> Path:
    """The cached store for a fleet size, built with the real CLI when missing."""
    db = cache / f"app-{gpus}x{days:g}d.duckdb"
    if db.exists():
        return db
    bundle, tmp = cache / f"bundle-{gpus}x{days:g}d", cache / f"tmp-{gpus}x{days:g}d.duckdb"
    gw = [sys.executable, "-m", "gpuwatch"]
    subprocess.run([*gw, "simulate", "--gpus", str(gpus), "--days", str(days), "--step", "60", "--start", START,
                    "--out", str(bundle)], check=True, cwd=ROOT)
    subprocess.run([*gw, "ingest", "--from", str(bundle), "--db", str(tmp)], check=True, cwd=ROOT)
    tmp.rename(db)  # only a finished store is ever cached
    shutil.rmtree(bundle)
    return db


def persisted_store(db: Path) -> Path:
    """A copy of ``db`` with the analyze step's results persisted for its default window."""
    from gpuwatch import analyses
    from gpuwatch import store as stores
    from gpuwatch.analyses import params

    copy = db.with_name(db.stem + "-persisted.duckdb")
    if copy.exists():
        return copy
    tmp = db.with_name(db.stem + "-persisting.duckdb")
    shutil.copyfile(db, tmp)
    con = stores.connect(str(tmp))
    try:  # the window `gpuwatch analyze` defaults to: the 7 days up to the hour after the last sample
        start, end = params.window(stores.data_range(con)[1])
        analyses.persist(con, params.params(start, end))
    finally:
        con.close()
    tmp.rename(copy)
    return copy


def page_times(db: Path, *, repeat: int) -> dict[str, float]:
    """Seconds per page's first render: no analysis result cached, the server already up.

    A warm-up run first (imports, the read-only connection, as a running server has them);
    then, per page, every cached analysis result is dropped before the page is timed.
    """
    import streamlit as st
    from streamlit.testing.v1 import AppTest

    os.environ["GPUWATCH_DB"] = str(db)
    times = {}
    at = AppTest.from_file(str(ROOT / "app" / "streamlit_app.py"), default_timeout=600)
    at.switch_page("views/reclaim_audit.py").run()  # warm-up: imports + connection + sidebar
    for page in PAGES:
        times[page] = float("inf")
        for _ in range(repeat):
            st.cache_data.clear()
            started = time.perf_counter()
            at.switch_page(f"views/{page}.py").run()
            times[page] = min(times[page], time.perf_counter() - started)
            if at.exception:
                raise RuntimeError(f"{page}: {at.exception[0].value}")
    return times


def report_time(db: Path, *, repeat: int) -> float:
    from gpuwatch import cli

    best = float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as out:
            started = time.perf_counter()
            assert cli.main(["report", "weekly", "--db", str(db), "--out", out]) == 0
            best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, nargs="+", default=[64, 1024])
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "gpuwatch-bench")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is shown")
    args = parser.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    results, columns = {}, []
    for gpus in args.gpus:
        db = store(gpus, args.days, args.cache)
        for label, path in ((f"{gpus} GPUs", db), (f"{gpus} persisted", persisted_store(db))):
            results[label] = {**page_times(path, repeat=args.repeat), "weekly report": report_time(path, repeat=args.repeat)}
            columns.append(label)
    print(f"\nfirst render (no cached analysis), seconds, best of {args.repeat} ({args.days:g} days of 1-min "
          f"samples; AppTest, in-process; 'persisted' = read the analyze step's stored results)")
    header = f"{'':<20}" + "".join(f"{c:>17}" for c in columns) + f"{'budget':>9}"
    print(header + "\n" + "-" * len(header))
    for row in (*PAGES, "weekly report"):
        budget = REPORT_BUDGET_S if row == "weekly report" else PAGE_BUDGET_S
        cells = "".join(f"{results[c][row]:>16.2f}{'*' if results[c][row] > budget else ' '}" for c in columns)
        print(f"{row:<20}{cells}{budget:>8.0f}s")
    print(f"* over budget    load average (1, 5, 15 min) at the end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
