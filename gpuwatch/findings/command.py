"""`gpuwatch analyze`: run every analysis over a window; write one CSV each, or print a summary.

Outputs (docs/architecture.md#finding-semantics): utilization, idle_hoarding, false_utilization, busy_without_work,
mig_fragmentation, fragmentation_fgd, chargeback, the failure modes, the topology findings (topology_placement,
schedulable_capacity, blocked_demand; docs/architecture.md#topology) and recommendations. Every threshold in analyses.params.DEFAULTS is a
flag (``--idle-below 0.05`` ...). ``--input DIR`` / ``--from URL`` ingest first. ``judgement`` says which
findings the window's evidence can judge (findings/judgement.py); the summary names every blind spot.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from gpuwatch import analyses, idle_bridge, recommendations, signals, store, units
from gpuwatch.analyses import chargeback
from gpuwatch.analyses import params as defaults
from gpuwatch.findings import FAILURES, TOPOLOGY, csvfile, findings, judgement, too_small
from gpuwatch.ingest import command

log = logging.getLogger(__name__)
OUTPUTS = ("utilization", "idle_hoarding", "false_utilization", "busy_without_work", "mig_fragmentation", "fragmentation_fgd",
           "chargeback", *FAILURES, *TOPOLOGY, "recommendations", "judgement")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", required=True, help="DuckDB store (created if missing)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--input", help="ingest this bundle directory first")
    source.add_argument("--from", dest="source", help="ingest first from prometheus://host:port, a DIR or a .prom file")
    parser.add_argument("--window", default="7d", help="window length, e.g. 7d, 36h (default: %(default)s)")
    parser.add_argument("--end", help="window end, ISO-8601 UTC (default: the hour after the last data point)")
    parser.add_argument("--out", help="directory for the CSV files (required for --format csv)")
    parser.add_argument("--format", choices=("csv", "table"), default="csv", help="output (default: %(default)s)")
    parser.add_argument("--group-by", default="", metavar="LABEL",
                        help="also split chargeback rows by this pod label (e.g. cost_center): column group_value")
    parser.add_argument("--drift-pool-label", default="", metavar="LABEL",
                        help="driver_drift: also split GPU pools by this node label (as kube_node_labels names it, "
                             "e.g. karpenter_sh_nodepool); default: pools by GPU model")
    group = parser.add_argument_group("thresholds (docs/architecture.md#finding-semantics)")
    for key, value in defaults.DEFAULTS.items():
        group.add_argument(f"--{key.replace('_', '-')}", dest=key, type=float, default=value,
                           help=f"{defaults.HELP[key]} (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    # every flag's value is checked, in the order given on the command line's help, before what is missing
    end = units.parse_utc(args.end, what="--end") if args.end else None
    length = timedelta(seconds=units.parse_duration(args.window, what="--window"))
    thresholds = {k: getattr(args, k) for k in defaults.DEFAULTS}
    defaults.check(thresholds)  # every flag is checked before the store is touched
    group_by = defaults.label_key(args.group_by, what="--group-by")
    pool_label = defaults.label_key(args.drift_pool_label, what="--drift-pool-label")
    if args.format == "csv" and not args.out:
        print("gpuwatch analyze: --out DIR is required with --format csv", file=sys.stderr)
        return 2
    if args.out and Path(args.out).exists() and not Path(args.out).is_dir():
        raise units.UsageError(f"--out: {args.out} is a file, not a directory")
    if args.input or args.source:
        command.check_source(args.input or args.source)
    elif not Path(args.db).exists():  # a mistyped --db: say so instead of creating an empty store
        raise units.UsageError(f"--db: {args.db}: no such store (create one with `gpuwatch ingest --from SOURCE "
                               f"--db {args.db}`, or give --input/--from to ingest first)")
    con = store.connect(args.db)
    if args.input or args.source:
        command.ingest(con, args.input or args.source)
    now = datetime.now(UTC).replace(tzinfo=None)  # the analysis' own clock: data dated after it is left out
    first, last = store.data_range(con, now=now)
    ahead = clock_warning(store.ahead_of_clock(con, now=now), now=now)
    start, end = defaults.window(last, length=length, end=end, first_ts=first)
    if ahead and not args.end:
        end = min(end, now)
    params = defaults.params(start, end, **thresholds, group_by=group_by, drift_pool_label=pool_label)
    # store this window's SQL results in the DB: the app and the report read them (analyses/persisted.py),
    # and analyze() below reads them too, so the samples are scanned once per analysis
    analyses.persist(con, params)
    results = analyze(con, params)
    if args.out:
        write_csvs(results, Path(args.out), data_as_of=data_as_of(last, end))
    if args.format == "table":
        print(summary(results, start=start, end=end, hours_per_month=params["hours_per_month"]))
    for line in [ahead, *data_warnings(analyses.run(con, "data_coverage"))]:
        if line:
            print(f"gpuwatch analyze: warning: {line}", file=sys.stderr)
    return 0


def data_warnings(coverage) -> list[str]:
    """The money rules that applied to this data (docs/architecture.md#billing), one line each."""
    row = coverage.iloc[0] if len(coverage) else {}
    out = []
    if int(row.get("conflicted_samples", 0) or 0):
        out.append(f"{int(row['conflicted_samples']):,} sample(s) had duplicate copies that disagree: their values "
                   "are unknown (not judged idle or busy; their time is billed as unobserved), never the max")
    if int(row.get("zero_count_pods", 0) or 0):
        out.append(f"{int(row['zero_count_pods']):,} pod(s) listed with gpu_count 0 have samples on a GPU: "
                   "charged for those samples at the device's share and price, never $0")
    return out


def clock_warning(ahead: tuple[int, int, datetime | None], *, now: datetime) -> str:
    """The line saying which samples are dated after the analysis clock (left out), '' when none are."""
    samples, devices, latest = ahead
    if not samples:
        return ""
    return (f"{samples:,} sample(s) of {devices} device(s) are dated after this machine's clock "
            f"({now:%Y-%m-%d %H:%M:%S} UTC; latest {latest:%Y-%m-%d %H:%M:%S}): left out of the window "
            "(a clock running ahead on those nodes, or this machine's clock behind)")


# Findings that need no other analysis' result and spend their time in DuckDB: computed on a second
# connection while the others (much of their time in Python finishers) run, then handed over.
AHEAD = ("gang_stall",)


def analyze(con: Any, params: dict) -> dict:
    """Every output frame, by file name (the findings assembly, limited to the CSVs analyze writes)."""
    from concurrent.futures import ThreadPoolExecutor

    def ahead(name: str) -> Any:
        other = store.cursor(con)
        try:
            return analyses.run(other, name, **params)
        finally:
            other.close()

    with ThreadPoolExecutor(max_workers=1) as pool:
        early = {name: pool.submit(ahead, name) for name in AHEAD}

        def run(con: Any, name: str, **kwargs: Any) -> Any:
            return early[name].result() if name in early else analyses.run(con, name, **kwargs)
        results = findings(con, params, only=OUTPUTS, run=run)
    return {name: results[name] for name in OUTPUTS}


def write_csvs(results: dict, out: Path, *, data_as_of: str | None = None) -> None:
    """One CSV per analysis: timestamps ISO-8601 UTC, floats to 12 significant digits, text cells safe to
    open in a spreadsheet; every row carries ``data_as_of`` (the reclaim controller acts on no
    findings without it)."""
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in results.items():
        rows = chargeback.csv_rows(frame) if name == "chargeback" else frame
        csvfile.to_csv(rows.assign(data_as_of=data_as_of or ""), out / f"{name}.csv")
    log.info("wrote %d files to %s", len(results), out)


def data_as_of(last: datetime | None, end: datetime) -> str | None:
    """The time of the latest sample the window's findings rest on (ISO-8601 UTC), None without data;
    ``last``: the end of the store's data (store.data_range)."""
    return None if last is None else min(last, end).strftime("%Y-%m-%dT%H:%M:%SZ")


def summary(results: dict, *, start: datetime, end: datetime, hours_per_month: float = units.HOURS_PER_MONTH) -> str:
    """A readable plain-text summary of the headline numbers."""
    lines = [f"gpuwatch analysis {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC"]
    judged = results.get("judgement")
    usd = _usd if judgement.judged(judged, "prices") else functools.partial(_usd, unpriced=True)
    charge = results.get("chargeback")
    if charge is not None and not judgement.judged(judged, "chargeback"):  # no GPU priced: no dollar is known
        lines.append(f"fleet cost: {judgement.line(judged, 'chargeback')}")
    elif charge is not None and len(charge):
        lines += _chargeback_lines(charge, false_judged=judgement.judged(judged, "false_utilization"))
    idle = results.get("idle_hoarding")
    if idle is not None:
        hoarders = idle[idle["hoarder"].fillna(False).astype(bool)]
        lines.append(f"hoarders: {len(hoarders)} pods, {hoarders['idle_gpu_hours'].sum():,.1f} idle GPU-hours")
        lines += idle_bridge.bridge(idle, chargeback=charge, hours_per_month=hours_per_month).lines()
    false = results.get("false_utilization")
    if false is not None and not judgement.judged(judged, "false_utilization"):
        lines.append(f"false utilization: {judgement.line(judged, 'false_utilization')}")
        lines += _busy_lines(results.get("busy_without_work"), judged, usd)
    elif false is not None:
        offenders = false[false["offender"].fillna(False).astype(bool)]
        partly = judgement.line(judged, "false_utilization")
        lines.append(f"false utilization: {len(offenders)} pods, {usd(offenders['false_util_cost_usd'])}"
                     + (f" ({partly.split('; enable:')[0]})" if partly else ""))
    mig = results.get("mig_fragmentation")
    if mig is not None and "stranded_slices" in mig:
        lines.append(f"MIG: {int(mig['stranded_slices'].sum())} stranded memory slices on {len(mig)} MIG GPUs")
    lines += _failure_lines(results, usd)
    lines += _topology_lines(results, judged, usd)
    recs = results.get("recommendations")
    if recs is not None and len(recs):
        total = recommendations.totals(recs)
        lines.append(f"recommendations: {len(recs)}, savings {usd(total['savings'])}/month "
                     f"(run-rate of the waste observed in the window, x {hours_per_month:g} h/month); "
                     f"investigate: {usd(total['at_stake'])}/month at stake, not counted; top 5:")
        for _, r in recs.head(5).iterrows():
            lines.append(f"  {usd(r['monthly_savings_usd'])}/month - {r['action']} - {r['evidence']}")
    return "\n".join(lines + blind_spots(judged))


def blind_spots(judged: Any) -> list[str]:
    """What the window's evidence cannot judge (findings/judgement.py): one line per finding not judged
    or judged on less evidence, then each missing signal's enabling config once."""
    if judged is None or not len(judged):
        return []
    open_rows = judged[judged["state"] != "judged"]
    if not len(open_rows):
        return ["every finding judged: the evidence each needs is in the store"]
    out = ["not judged / partly judged (unknown is not 0; `gpuwatch doctor` lists every signal per node):"]
    out += [f"  {r.finding}: {r.state} - {r.reason}" for r in open_rows.itertuples()]
    missing = dict.fromkeys(n for r in open_rows.itertuples() if r.state != "unverified"
                            for n in r.missing.split(",") if n)
    if missing:
        out.append("to enable:")
        out += ["  " + line for block in signals.enable(*missing) for line in block.splitlines()]
    return out


def _usd(value: Any, unpriced: bool = False) -> str:
    """A dollar figure for the summary: a scalar, or a column whose known values are summed and whose
    unknown (unpriced) ones are counted; "unpriced" when none is known (never $0.00 for unknown)."""
    if not hasattr(value, "dropna"):
        return "unpriced" if unpriced or value != value else f"${value:,.2f}"
    known = value.dropna()
    if unpriced or (len(value) and not len(known)):
        return "unpriced"
    missing = len(value) - len(known)
    return f"${known.sum():,.2f}" + (f" (+{missing} unpriced)" if missing else "")


def _busy_lines(busy: Any, judged: Any, usd=_usd) -> list[str]:
    """The default counters' partial evidence where false utilization is not judged (its own label)."""
    if busy is None or not judgement.judged(judged, "busy_without_work"):
        return []
    suspects = busy[busy["suspect"].fillna(False).astype(bool)]
    return [f"busy without tensor/DRAM work (GPU_UTIL high, tensor and DRAM activity near 0; weaker evidence than "
            f"false utilization, not counted as savings): {len(suspects)} of {len(busy)} pods, "
            f"{suspects['suspect_gpu_hours'].sum():,.1f} GPU-hours, {usd(suspects['suspect_cost_usd'])} at stake"]


def _failure_lines(results: dict, usd=_usd) -> list[str]:
    """One line per failure-mode finding that found something (Health & fit)."""
    out = []
    sick = results.get("unhealthy_gpu")
    if sick is not None and len(sick):
        held = sick[(sick["severity"] == "hardware") & (sick["pods"].fillna("") != "")]
        out.append(f"unhealthy GPUs: {held['gpu_uuid'].nunique()} with hardware events under pods, "
                   f"{usd(held.drop_duplicates('gpu_uuid')['allocated_usd_at_risk'].sum())} allocated cost at risk")
    fit = results.get("mig_mismatch")
    if fit is not None and len(fit):
        small = too_small(fit)
        out.append(f"MIG/GPU too small: {len(small)} pods failing at their memory limit, {usd(small['usd_burnt'].sum())} burnt"
                   f" ({(fit['cause'] == 'host_memory').sum()} more OOMKilled: host memory)")
    orphans = results.get("orphaned_memory")
    if orphans is not None and len(orphans):
        out.append(f"orphaned GPU memory: {len(orphans)} runs on {orphans['gpu_uuid'].nunique()} GPUs, "
                   f"{usd(orphans['usd_unusable'])} unusable")
    drift = results.get("driver_drift")
    if drift is not None and len(drift):
        blamed = drift[drift["blamed"].fillna(False).astype(bool)]
        named = ", ".join(f"{r.pool} {r.driver_version}" for r in blamed.itertuples()) or "none blamed"
        out.append(f"driver drift: {drift['pool'].nunique()} pools on several drivers; failing: {named}")
    gangs = results.get("gang_stall")
    if gangs is not None and len(gangs):
        stalls = gangs[gangs["kind"] == "partial_allocation"]
        out.append(f"gang stalls: {stalls['job'].nunique()} jobs held idle GPUs waiting for siblings, "
                   f"{usd(stalls['usd_held_idle'].sum())}; {(gangs['kind'] == 'straggler').sum()} stragglers")
    return out


def _topology_lines(results: dict, judged: Any = None, usd=_usd) -> list[str]:
    """Misplaced/spread jobs and blocked pending pods (docs/architecture.md#topology; penalties are estimates);
    a finding its evidence cannot judge says so, never $0.00."""
    out = []
    placed = results.get("topology_placement")
    for name, title in (("topology_placement", "placement"), ("blocked_demand", "blocked demand")):
        if not judgement.judged(judged, name):
            out.append(f"{title}: {judgement.line(judged, name)}")
            results = {k: v for k, v in results.items() if k != name}
    placed = results.get("topology_placement")
    if placed is not None and len(placed):
        bad = placed[placed["verdict"].isin(("misplaced", "spread"))]
        unknown = int((placed["verdict"] == "topology unknown").sum())
        out.append(f"placement: {(bad['verdict'] == 'misplaced').sum()} misplaced, {(bad['verdict'] == 'spread').sum()} "
                   f"spread of {len(placed)} multi-GPU pods/jobs, est. penalty {usd(bad['penalty_usd'])} (estimate)"
                   + (f"; {unknown} not judged (topology unknown)" if unknown else ""))
    capacity = results.get("schedulable_capacity")
    if capacity is not None and len(capacity):
        last = capacity[capacity["bucket_ts"] == capacity["bucket_ts"].max()]
        nvlink = last["nvlink_jobs_8"].dropna()
        out.append(f"capacity now: {int(last['free_gpus'].sum())} free GPUs, {int(last['jobs_8'].sum())} 8-GPU pods could start"
                   + (f" ({int(nvlink.sum())} on NVLink blocks)" if len(nvlink) else ""))
    blocked = results.get("blocked_demand")
    if blocked is not None and len(blocked):
        stuck = blocked[blocked["verdict"] == "blocked"]
        out.append(f"blocked demand: {len(stuck)} pending pods could have run on the free GPUs had they formed a block, "
                   f"{usd(stuck['opportunity_usd'].sum())} opportunity cost")
    return out


def _chargeback_lines(charge: Any, *, false_judged: bool = True) -> list[str]:
    """The fleet cost, each priced row, then a warning per data problem (unpriced, over-allocated); the
    false-util column reads "not judged" where that finding is not (never $0.00)."""
    problems = chargeback.warnings(charge)
    if chargeback.fleet_unpriced(charge):  # unknown is said, never $0.00
        return ["fleet cost unpriced: no GPU in the window has a price (ingest --prices FILE, or --prices list)"] + [
            f"warning: {line}" for line in problems]
    lines = [f"fleet cost ${charge['fleet_cost_usd'].iloc[0]:,.2f}" + (" (priced GPUs only)" if problems else "")]
    for _, r in charge[~charge["kind"].isin(chargeback.PROBLEMS)].iterrows():
        false = f"${r['false_util_usd']:>9,.2f}" if false_judged else "not judged"
        lines.append(f"  {str(r['team'])[:24]:<24} {str(r['namespace'])[:22]:<22} ${r['cost_usd']:>11,.2f}"
                     f"  idle ${r['idle_usd']:>9,.2f}  false {false}")
    return lines + [f"warning: {line}" for line in problems]
