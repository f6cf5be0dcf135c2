"""Analyzer benchmark: simulate -> ingest -> every analysis, side by side with a pandas baseline.

    python bench/analyzer.py                 # 1,024 GPUs x 7 days x 30 s (20.6M samples)
    python bench/analyzer.py --gpus 256      # smaller
    python bench/analyzer.py --big           # also 10,240 GPUs x 7 days of 5 m rollups (docs/architecture.md#scale), ingest --link
    python bench/analyzer.py --big-only --big-step 60    # just that, at 60 s steps instead
    python bench/analyzer.py --promql        # also PromQL on a promtool-backfilled Prometheus (bench/promql.py)

Each phase runs in its own process so its peak RSS is its own. Prints one table; checks that the
pandas baseline and the analyses agree (hoarders, offenders, idle share, longest idle run).
Targets: all analyses <= 5 s and <= 2 GB; >= 10x the pandas baseline; --big (Parquet to every
finding) <= 60 s and <= 4 GB; topology_placement + schedulable_capacity <= 2 s. The fleet is simulated
with topology (build_fleet(topology=True): every node's links, plus the planted topology nodes and
workloads), so the topology analyses have layouts, placements and pending pods to judge. The 10,240-GPU fleet is read as docs/architecture.md#scale's 5-minute rollups by
default: the same 20.6M-sample order of size as 1,024 GPUs at 30 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ANALYSES = ("utilization", "idle_hoarding", "false_utilization", "chargeback", "rightsizing",
            "mig_fragmentation", "fragmentation_fgd",
            # docs/architecture.md#topology; target: placement and schedulable capacity (5-minute buckets,
            # capacity_bucket_seconds' default) <= 2 s on 1,024 GPUs x 7 days
            "topology_placement", "schedulable_capacity", "blocked_demand")


def _rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def phase_ingest(bundle: str, db: str) -> dict:
    from gpuwatch import store

    began = time.perf_counter()
    con = store.connect(db)
    counts = store.load_bundle(con, bundle)
    con.close()
    return {"seconds": time.perf_counter() - began, "peak_rss_bytes": _rss(), "rows": counts["samples"]}


def phase_link(bundle: str, db: str) -> dict:
    """`gpuwatch ingest --link`: samples stay in the Parquet files; only stg_samples is written."""
    from gpuwatch import store

    began = time.perf_counter()
    con = store.connect(db)
    counts = store.link_bundle(con, bundle)
    con.close()
    return {"seconds": time.perf_counter() - began, "peak_rss_bytes": _rss(), "rows": counts["samples"]}


def phase_load(bundle: str, db: str) -> dict:
    """One more load into an existing store (the last hour, or that hour sent again): incremental staging."""
    return phase_ingest(bundle, db)


def phase_analyze_cli(db: str, out: str) -> dict:
    """`gpuwatch analyze` end to end: every analysis, CSVs written, default results persisted."""
    from gpuwatch import cli

    began = time.perf_counter()
    code = cli.main(["analyze", "--db", db, "--out", out])
    return {"seconds": time.perf_counter() - began, "peak_rss_bytes": _rss(), "exit": code}


def split_last_hour(bundle: Path, work: Path) -> tuple[Path, Path]:
    """(every file but the last hour of samples, that hour's samples alone) as two bundle directories."""
    import datetime as dt
    import shutil

    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from gpuwatch.store import bundle as files

    rest, hour = work / "rest", work / "hour"
    for folder in (rest, hour):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
    found = files.find_files(bundle)
    table = pq.read_table(found["samples"])
    edge = pc.max(table["ts"]).as_py() - dt.timedelta(hours=1)
    keep = pc.less_equal(table["ts"], pa.scalar(edge, table["ts"].type))
    pq.write_table(table.filter(keep), rest / "samples.parquet")
    pq.write_table(table.filter(pc.invert(keep)), hour / "samples.parquet")
    for name, path in found.items():
        if name != "samples":
            shutil.copy(path, rest / path.name)
    return rest, hour


def incremental(work: Path, bundle: Path, me: str, *, hour_target: str = "2 s") -> list[str]:
    """Issue 16's cycle: a week minus its last hour in the store and analyzed (the previous cycle); the
    last hour loaded (and sent again), then `gpuwatch analyze`. Each step in its own process (its own peak RSS)."""
    import shutil

    # split in a child: reading the week's samples here would raise this process's peak RSS, which
    # Linux hands on to every child it starts (getrusage's ru_maxrss survives exec)
    split = _child(me, "--phase", "split", "--args", str(bundle), str(work))
    rest, hour = Path(split["rest"]), Path(split["hour"])
    base, db = work / "rest.duckdb", work / "cycle.duckdb"
    base.unlink(missing_ok=True)
    _child(me, "--phase", "ingest", "--args", str(rest), str(base))
    # the previous cycle: analyze once (it builds the hourly rollup the next cycle brings up to date)
    first = _child(me, "--phase", "analyze_cli", "--args", str(base), str(work / "first_out"))
    shutil.copy(base, db)
    new = _child(me, "--phase", "load", "--args", str(hour), str(db))
    again = _child(me, "--phase", "load", "--args", str(hour), str(db))
    analyze = _child(me, "--phase", "analyze_cli", "--args", str(db), str(work / "cycle_out"))
    rows = []
    for label, result, target in (("previous cycle's analyze (rollup built)", first, "-"),
                                  ("one new hour: ingest + stage", new, hour_target),
                                  ("the same hour sent again", again, hour_target),
                                  ("gpuwatch analyze, end to end", analyze, "3 s")):
        rows.append(f"{label + f' (target {target})':<44}{result['seconds']:>9.2f}{result['peak_rss_bytes'] / 2**20:>13.0f}")
    return rows


def phase_analyses(db: str, out: str) -> dict:
    from gpuwatch import analyses, store
    from gpuwatch.analyses.params import params, window

    con = store.connect(db, read_only=True)
    p = params(*window(store.data_range(con)[1]))
    timings, began = {}, time.perf_counter()
    for name in ANALYSES:
        if name in analyses.names():
            t = time.perf_counter()
            frame = analyses.run(con, name, **p)
            timings[name] = time.perf_counter() - t
            if name in ("idle_hoarding", "false_utilization"):
                frame.to_csv(Path(out) / f"duckdb_{name}.csv", index=False)
    return {"seconds": time.perf_counter() - began, "peak_rss_bytes": _rss(), "per_analysis": timings}


def _child(*args: str) -> dict:
    # the files the last phase wrote go to disk first: their write-back would otherwise land in this
    # phase's time (a 1.4 GB store written just before made the next ingest 1-2 s slower, at random)
    os.sync()
    reply = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(reply.stdout.strip().splitlines()[-1])


def compare(out: Path) -> list[str]:
    """Where the pandas baseline and the DuckDB analyses disagree (empty = they agree)."""
    import pandas as pd

    problems = []
    for name, flag, values in (("idle_hoarding", "hoarder", ("idle_share", "longest_idle_seconds")),
                               ("false_utilization", "offender", ("false_share",))):
        ours = pd.read_csv(out / f"duckdb_{name}.csv")
        theirs = pd.read_csv(out / f"pandas_{name}.csv")
        both = ours.merge(theirs, on=["namespace", "pod"], how="outer", suffixes=("", "_pd"), indicator=True)
        if (both["_merge"] != "both").any():
            problems.append(f"{name}: {(both['_merge'] != 'both').sum()} pods only on one side")
        if (both[flag].fillna(False) != both[f"{flag}_pd"].fillna(False)).any():
            problems.append(f"{name}: {flag} differs for {(both[flag] != both[f'{flag}_pd']).sum()} pods")
        for column in values:
            diff = (both[column] - both[f"{column}_pd"]).abs().max()
            if diff > 1e-6:
                problems.append(f"{name}: {column} differs by up to {diff}")
    return problems


def simulate(out: Path, *, gpus: int, days: float, step: float) -> tuple[float, int]:
    from gpuwatch import fleet as workloads
    from gpuwatch.fleet import command as sim

    began = time.perf_counter()
    counts = sim.write_bundle(workloads.build_fleet(gpus=gpus, seed=0, days=days, topology=True), out, step=step)
    return time.perf_counter() - began, counts["samples"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--days", type=float, default=7.0)
    parser.add_argument("--step", type=float, default=30.0)
    parser.add_argument("--big", action="store_true", help="also 10,240 GPUs x 7 days, ingested with --link")
    parser.add_argument("--big-gpus", type=int, default=10_240)
    parser.add_argument("--big-step", type=float, default=300.0,
                        help="sampling step of --big (default 300: the 5 m rollups docs/architecture.md#scale ingests for large fleets)")
    parser.add_argument("--big-only", action="store_true", help="run --big alone")
    parser.add_argument("--promql", action="store_true", help="also PromQL on Prometheus (bench/promql.py)")
    parser.add_argument("--promql-gpus", type=int, default=64)
    parser.add_argument("--workdir", help="keep files here (default: a temporary directory)")
    parser.add_argument("--reuse", action="store_true", help="reuse the bundle and store already in --workdir")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--args", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:  # a child process: one phase, JSON on stdout
        result = {"ingest": lambda a: phase_ingest(*a), "analyses": lambda a: phase_analyses(*a),
                  "link": lambda a: phase_link(*a), "load": lambda a: phase_load(*a),
                  "analyze_cli": lambda a: phase_analyze_cli(*a),
                  "split": lambda a: dict(zip(("rest", "hour"), map(str, split_last_hour(Path(a[0]), Path(a[1]))), strict=True))
                  }[args.phase](args.args)
        print(json.dumps(result))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        rows = run_main(work, args)
    print("\n".join(rows))
    return 0


def run_main(work: Path, args) -> list[str]:
    bundle, db, out = work / "bundle", work / "bench.duckdb", work / "out"
    out.mkdir(exist_ok=True)
    me = str(Path(__file__).resolve())
    if args.big_only:
        return big(work, args, me)
    if args.reuse and db.exists():  # timings of the earlier simulate/ingest are not repeated
        import pyarrow.parquet as pq

        sim_s, samples = float("nan"), pq.ParquetFile(bundle / "samples.parquet").metadata.num_rows
        ingest = {"seconds": float("nan"), "peak_rss_bytes": float("nan")}
    else:
        db.unlink(missing_ok=True)
        sim_s, samples = simulate(bundle, gpus=args.gpus, days=args.days, step=args.step)
        ingest = _child(me, "--phase", "ingest", "--args", str(bundle), str(db))
    ours = _child(me, "--phase", "analyses", "--args", str(db), str(out))
    theirs = _child(str(ROOT / "bench" / "pandas_baseline.py"), str(bundle), str(out))
    problems = compare(out)
    rows = [f"analyzer benchmark: {args.gpus:,} GPUs x {args.days:g} days x {args.step:g} s = {samples:,} samples",
            "", f"{'phase':<44}{'wall s':>9}{'peak RSS MB':>13}",
            f"{'simulate -> Parquet':<44}{sim_s:>9.1f}{'':>13}",
            f"{'ingest (validate + load + stage)':<44}{ingest['seconds']:>9.1f}{ingest['peak_rss_bytes'] / 2**20:>13.0f}",
            f"{'all analyses (DuckDB)':<44}{ours['seconds']:>9.2f}{ours['peak_rss_bytes'] / 2**20:>13.0f}"]
    rows += [f"{'  ' + name:<44}{s:>9.2f}" for name, s in ours["per_analysis"].items()]
    topo = ours["per_analysis"].get("topology_placement", 0) + ours["per_analysis"].get("schedulable_capacity", 0)
    rows += [f"{'placement + schedulable capacity (target 2 s)':<44}{topo:>9.2f}"]
    both = ours["per_analysis"].get("idle_hoarding", 0) + ours["per_analysis"].get("false_utilization", 0)
    rows += ["", "incremental cycle (issue 16): the week less its last hour stored, then:"]
    rows += incremental(work, bundle, me)
    rows += ["", f"{'full week ingest (target 15 s, 2 GB)':<44}{ingest['seconds']:>9.1f}{ingest['peak_rss_bytes'] / 2**20:>13.0f}"]
    rows += [f"{'idle + false util (DuckDB)':<44}{both:>9.2f}",
             f"{'idle + false util (pandas baseline)':<44}{theirs['seconds']:>9.2f}{theirs['peak_rss_bytes'] / 2**20:>13.0f}",
             f"speed-up on idle + false util: {theirs['seconds'] / max(both, 1e-9):.1f}x; "
             f"answers {'agree' if not problems else 'DIFFER: ' + '; '.join(problems)}"]
    if args.big:
        rows += big(work, args, me)
    if args.promql:
        rows += promql(work, args)
    return rows


def big(work: Path, args, me: str) -> list[str]:
    bundle, db = work / "big", work / "big.duckdb"
    db.unlink(missing_ok=True)
    sim_s, samples = simulate(bundle, gpus=args.big_gpus, days=args.days, step=args.big_step)
    linked = _child(me, "--phase", "link", "--args", str(bundle), str(db))
    result = _child(me, "--phase", "analyses", "--args", str(db), str(work / "out"))
    total = linked["seconds"] + result["seconds"]
    cycle = work / "big_cycle"  # the issue-16 cycle on a copied (not linked) store of the same fleet
    cycle.mkdir(exist_ok=True)
    rows = incremental(cycle, bundle, me, hour_target="5 s")
    return ["", f"--big: {args.big_gpus:,} GPUs x {args.days:g} days x {args.big_step:g} s = {samples:,} samples "
                f"(simulated in {sim_s:.0f} s)",
            f"{'ingest --link (check + stage, Parquet stays)':<44}{linked['seconds']:>9.1f}"
            f"{linked['peak_rss_bytes'] / 2**20:>13.0f}",
            f"{'all analyses (DuckDB)':<44}{result['seconds']:>9.2f}{result['peak_rss_bytes'] / 2**20:>13.0f}",
            f"{'from Parquet to every finding':<44}{total:>9.1f}"
            f"{max(linked['peak_rss_bytes'], result['peak_rss_bytes']) / 2**20:>13.0f}",
            "incremental cycle on a copied store:", *rows]


def promql(work: Path, args) -> list[str]:
    path = ROOT / "bench" / "promql.py"
    if not path.exists():
        return ["", "--promql: bench/promql.py is not there; skipped"]
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_promql", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from gpuwatch import analyses, store
    from gpuwatch import fleet as workloads
    from gpuwatch.analyses.params import params

    bundle = work / "promql_bundle"
    fleet = workloads.build_fleet(gpus=args.promql_gpus, seed=0, days=1)
    from gpuwatch.fleet.command import write_bundle

    write_bundle(fleet, bundle, step=60)
    module.backfill_from_bundle(bundle, work / "tsdb")
    con = store.connect(None)
    store.load_bundle(con, bundle)
    p = params(module._utc(fleet.start), module._utc(fleet.end))
    began = time.perf_counter()
    for name in ("idle_hoarding", "false_utilization"):
        analyses.run(con, name, **p)
    ours = time.perf_counter() - began
    with module.prometheus(work / "tsdb") as url:
        theirs, _ = module.run(url, start=fleet.start, end=fleet.end)
    return ["", f"--promql: {args.promql_gpus} GPUs x 1 day x 60 s",
            f"{'idle + false util (DuckDB)':<44}{ours:>9.2f}", f"{'idle + false util (PromQL)':<44}{theirs:>9.2f}"]


if __name__ == "__main__":
    raise SystemExit(main())
