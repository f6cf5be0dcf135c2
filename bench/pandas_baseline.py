"""A straightforward pandas implementation of idle hoarding and false utilization (docs/architecture.md#finding-semantics), as
someone would write it in a notebook: read the bundle, sort, groupby. bench/analyzer.py times it
side by side with the DuckDB analyses and checks that the answers agree.

    python bench/pandas_baseline.py BUNDLE_DIR   # prints JSON: seconds, peak RSS, results summary
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

import pandas as pd

IDLE_BELOW, GAP_STEPS, MIN_RUN, HOARDER_SHARE, MIN_OBSERVED = 0.05, 3.0, 900.0, 0.9, 3600.0
FALSE_REPORTED, FALSE_EFFECTIVE, OFFENDER_SHARE = 0.5, 0.25, 0.5
COLUMNS = ["ts", "node", "gpu_uuid", "mig_gi_id", "namespace", "pod", "gpu_util", "gr_engine_active", "sm_active"]


def load(bundle: Path) -> pd.DataFrame:
    frame = pd.read_parquet(bundle / "samples.parquet", columns=COLUMNS)
    frame = frame[frame["pod"].notna()]
    for column in ("node", "gpu_uuid", "namespace", "pod"):
        frame[column] = frame[column].astype(str)
    frame["reported"] = frame["gpu_util"].fillna(frame["gr_engine_active"])
    frame = frame[frame["reported"].notna()].copy()
    frame["device"] = frame["gpu_uuid"] + "/" + frame["mig_gi_id"].fillna(-1).astype(int).astype(str)
    frame["ts"] = frame["ts"].astype("datetime64[ns, UTC]").astype("int64") / 1e9
    return frame.sort_values(["namespace", "pod", "device", "ts"], kind="stable").reset_index(drop=True)


def idle_hoarding(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["namespace", "pod", "device"]
    series = frame.groupby(keys, sort=False, observed=True)
    dt = series["ts"].diff()
    step = dt.groupby([frame[k] for k in keys], observed=True).transform("median").fillna(60.0)
    idle = (frame["reported"] < IDLE_BELOW) & ~(frame["sm_active"] >= IDLE_BELOW)
    new_series = dt.isna()
    breaks = new_series | (dt > GAP_STEPS * step) | ~idle.shift(fill_value=False) | new_series
    run_id = (idle & breaks).cumsum().where(idle)
    runs = pd.DataFrame({"namespace": frame["namespace"], "pod": frame["pod"], "device": frame["device"],
                         "ts": frame["ts"], "step": step, "run": run_id}).dropna(subset=["run"])
    run_len = runs.groupby("run").agg(namespace=("namespace", "first"), pod=("pod", "first"), device=("device", "first"),
                                      first=("ts", "min"), last=("ts", "max"), step=("step", "first"))
    run_len["seconds"] = run_len["last"] - run_len["first"] + run_len["step"]
    per = pd.DataFrame({"namespace": frame["namespace"], "pod": frame["pod"], "device": frame["device"],
                        "idle": idle * step, "busy": (~idle) * step, "ts": frame["ts"], "step": step})
    per_series = per.groupby(keys, observed=True).agg(idle=("idle", "sum"), busy=("busy", "sum"), last=("ts", "max"),
                                                      step=("step", "first")).reset_index()
    window_last = per_series["last"].max()
    trailing = run_len.merge(per_series[[*keys, "last"]], on=keys, suffixes=("", "_series"))
    trailing = trailing[trailing["last"] == trailing["last_series"]]
    per_series = per_series.merge(trailing[[*keys, "seconds"]], on=keys, how="left")
    per_series["reclaimable"] = (per_series["seconds"] >= MIN_RUN) & (window_last - per_series["last"] <= per_series["step"])
    pods = per_series.groupby(["namespace", "pod"], observed=True).agg(
        idle=("idle", "sum"), busy=("busy", "sum"), reclaimable=("reclaimable", "all"))
    observed = (per_series["idle"] + per_series["busy"]).groupby([per_series["namespace"], per_series["pod"]], observed=True).max()
    pods["observed"] = observed
    pods["idle_share"] = pods["idle"] / (pods["idle"] + pods["busy"])
    pods["longest_idle_seconds"] = run_len.groupby(["namespace", "pod"], observed=True)["seconds"].max()
    pods["longest_idle_seconds"] = pods["longest_idle_seconds"].fillna(0.0)
    pods["hoarder"] = ((pods["idle_share"] >= HOARDER_SHARE) & (pods["observed"] >= MIN_OBSERVED)) | pods["reclaimable"]
    return pods[["idle_share", "longest_idle_seconds", "hoarder"]].reset_index()


def false_utilization(frame: pd.DataFrame) -> pd.DataFrame:
    known = frame["sm_active"].notna()
    false = known & (frame["reported"] >= FALSE_REPORTED) & (frame["sm_active"] < FALSE_EFFECTIVE)
    g = pd.DataFrame({"namespace": frame["namespace"], "pod": frame["pod"], "known": known, "false": false})
    pods = g.groupby(["namespace", "pod"], observed=True).agg(known=("known", "sum"), false=("false", "sum"))
    pods["false_share"] = pods["false"] / pods["known"].where(pods["known"] > 0)
    pods["offender"] = pods["false_share"] >= OFFENDER_SHARE
    return pods[["false_share", "offender"]].reset_index()


def main(argv: list[str]) -> int:
    bundle, out = Path(argv[0]), Path(argv[1]) if len(argv) > 1 else None
    began = time.perf_counter()
    frame = load(bundle)
    idle, false = idle_hoarding(frame), false_utilization(frame)
    seconds = time.perf_counter() - began
    if out is not None:
        idle.to_csv(out / "pandas_idle_hoarding.csv", index=False)
        false.to_csv(out / "pandas_false_utilization.csv", index=False)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"seconds": seconds, "peak_rss_bytes": rss, "rows": len(frame),
                      "hoarders": int(idle["hoarder"].sum()), "offenders": int(false["offender"].sum())}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
