"""Default thresholds for every analysis, in one place, with their valid ranges, and the analysis window.

Every key is a bound ``$param`` of some analysis and a flag of ``gpuwatch analyze``
(``--idle-below`` for ``idle_below``, ...). Units are in the names or the comments.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from typing import Any

from gpuwatch import units

DEFAULTS: dict[str, float] = {
    "idle_below": 0.05,                # ratio: reported (and effective, where known) below this is idle
    "min_idle_run_seconds": 900.0,     # an idle run this long ending now makes a pod reclaimable
    "hoarder_idle_share": 0.9,         # idle / observed at or above this ...
    "min_observed_seconds": 3600.0,    # ... with at least this much observed time is a hoarder
    "false_reported_min": 0.5,         # ratio: reported at or above this ...
    "false_effective_below": 0.25,     # ... while effective (SM active) is below this is false utilization
    "false_offender_share": 0.5,       # a pod with false-util time >= this share of judged time is an offender
    "quiet_below": 0.05,               # busy_without_work: tensor and DRAM activity both below this (no SM activity)
    "gap_steps": 3.0,                  # an interval longer than this many steps is a gap (unknown time)
    "mem_headroom": 0.2,               # rightsizing: MIG memory must cover peak fb_used_bytes x (1 + this)
    "compute_quantile": 0.95,          # rightsizing: MIG compute must cover this quantile of SM activity
    "hours_per_month": units.HOURS_PER_MONTH,  # monthly savings = hourly savings x this
    # failure modes (docs/architecture.md#finding-semantics)
    "orphan_gpu_baseline_bytes": 64 * 2**20,   # an empty whole GPU holds up to this (MIG-mode GPUs: ~55-59 MiB)
    "orphan_mig_baseline_bytes": 32 * 2**20,   # an empty MIG instance holds up to this (captures: 9-26 MiB)
    "orphan_min_seconds": 900.0,       # memory held with no pod for at least this long is orphaned
    "mismatch_mem_share": 0.95,        # a failed run whose memory reached this share of its device ran out
    "mismatch_min_failures": 2.0,      # ... at least this many such failed runs make a mismatch
    "drift_min_failures": 3.0,         # failed starts on one driver version needed to blame it
    "drift_rate_ratio": 2.0,           # ... at a failure rate at least this many times the pool's other versions'
    "drift_start_seconds": 600.0,      # a non-zero exit this soon after a pod's start is a failed start
    "gang_min_seconds": 900.0,         # siblings Pending while GPUs are held idle this long is a stall
    "straggler_gap": 0.3,              # a GPU whose SM activity sits this far below its job's median ...
    "straggler_min_seconds": 1800.0,   # ... for at least this long is a straggler
    # topology (docs/architecture.md#topology): the penalty model is an estimate
    "placement_comm_share": 0.1,       # share of a step spent in collectives with the better block
    "placement_numa_penalty": 0.05,    # share of GPU time lost to a NUMA split where the links are equal
    "capacity_bucket_seconds": 300.0,  # schedulable capacity and blocked demand are judged per bucket this long
    "blocked_min_seconds": 600.0,      # a pending pod blocked by fragmentation this long is 'blocked'
}
HELP: dict[str, str] = {
    "idle_below": "ratio 0-1 under which a sample is idle",
    "min_idle_run_seconds": "seconds of trailing idleness that make a pod reclaimable now",
    "hoarder_idle_share": "idle share (0-1) that makes a pod a hoarder",
    "min_observed_seconds": "observed seconds a pod needs before the idle share counts",
    "false_reported_min": "reported utilization (0-1) at or above which a sample may be false",
    "false_effective_below": "SM activity (0-1) below which a busy-looking sample is false",
    "false_offender_share": "share of judged time in false utilization that flags a pod",
    "quiet_below": "tensor and DRAM activity (0-1) both below which a busy-looking sample without SM activity is "
                   "suspect (busy_without_work)",
    "gap_steps": "steps without a sample that count as a gap (unknown time)",
    "mem_headroom": "memory headroom over a pod's peak for rightsizing (0.2 = 20%%)",
    "compute_quantile": "quantile of SM activity a right-sized MIG profile must cover",
    "hours_per_month": "hours in a month for savings estimates",
    "orphan_gpu_baseline_bytes": "bytes an empty whole GPU may hold before memory counts as orphaned",
    "orphan_mig_baseline_bytes": "bytes an empty MIG instance may hold before memory counts as orphaned",
    "orphan_min_seconds": "seconds memory must be held with no pod to be orphaned",
    "mismatch_mem_share": "share (0-1) of its device's memory a failed run reached to count as out of memory",
    "mismatch_min_failures": "failed runs near the memory limit that make a MIG/GPU size mismatch",
    "drift_min_failures": "failed starts on one driver version needed to blame that version",
    "drift_rate_ratio": "how many times the pool's other versions' failure rate a version must reach",
    "drift_start_seconds": "seconds after a pod's start within which a non-zero exit is a failed start",
    "gang_min_seconds": "seconds a job holds idle GPUs while siblings are Pending to be a stall",
    "straggler_gap": "SM activity (0-1) below the job's median that makes a GPU a straggler",
    "straggler_min_seconds": "seconds a GPU must lag its job's median to be a straggler",
    "placement_comm_share": "share (0-1) of a multi-GPU step spent in collectives, for the placement penalty estimate",
    "placement_numa_penalty": "share (0-1) of GPU time a NUMA split costs where the links are equal (estimate)",
    "capacity_bucket_seconds": "seconds per bucket of schedulable capacity and blocked demand",
    "blocked_min_seconds": "seconds a pending pod must be blocked by fragmentation to be reported blocked",
}
# Text options (not thresholds): ``group_by`` = a pod label key chargeback also groups by ('' = none);
# ``drift_pool_label`` = a node label key (as the nodes file / kube_node_labels name it, e.g.
# karpenter_sh_nodepool) that splits driver_drift's pools beyond the GPU model ('' = the model alone).
OPTIONS: dict[str, str] = {"group_by": "", "drift_pool_label": ""}


def label_key(text: str, *, what: str) -> str:
    """A pod label key (``cost_center``, ``example.com/project``) or '' (none); else UsageError."""
    return units.parse_label_key(text, what=what, example="cost_center or example.com/project") if text else text


# Valid range per threshold (inclusive): ratios and shares in 0-1, durations and counts >= 0.
RANGES: dict[str, tuple[float, float]] = {
    **dict.fromkeys(("idle_below", "hoarder_idle_share", "false_reported_min", "false_effective_below", "quiet_below",
                     "false_offender_share", "compute_quantile", "mismatch_mem_share", "straggler_gap",
                     "placement_comm_share", "placement_numa_penalty"), (0.0, 1.0)),
    **dict.fromkeys(("min_idle_run_seconds", "min_observed_seconds", "mem_headroom", "orphan_gpu_baseline_bytes",
                     "orphan_mig_baseline_bytes", "orphan_min_seconds", "gang_min_seconds", "straggler_min_seconds",
                     "blocked_min_seconds", "drift_start_seconds"),
                    (0.0, math.inf)),
    **dict.fromkeys(("mismatch_min_failures", "drift_min_failures"), (1.0, math.inf)),
    "drift_rate_ratio": (1.0, math.inf),
    "gap_steps": (1.0, math.inf), "hours_per_month": (1.0, 744.0),
    "capacity_bucket_seconds": (60.0, 86400.0),
}


def check(thresholds: dict[str, float]) -> None:
    """Every threshold finite and inside its range, else UsageError naming its flag (--idle-below ...)."""
    for key, value in thresholds.items():
        low, high = RANGES[key]
        if not (math.isfinite(value) and low <= value <= high):
            flag = "--" + key.replace("_", "-")
            raise units.UsageError(f"{flag}: {value!r} is outside {low:g}..{high:g} ({HELP[key]})")


def window(last_ts: datetime | None, *, length: timedelta = timedelta(days=7),
           end: datetime | None = None, first_ts: datetime | None = None) -> tuple[datetime, datetime]:
    """The analysis window [start, end): ``end`` defaults to the hour after the last data point
    (DataError when there is none: an empty store is bad data, exit 1, not a traceback); a default
    ``end`` is clipped to the data at the start too: never before ``first_ts``'s hour (the app's time
    range does the same), so one day of data is a one-day window, not a week the fleet is billed for.
    (Money never depends on it: each GPU costs only while it is known to exist, stg_gpu_presence.)"""
    if end is None:
        if last_ts is None:
            raise units.DataError("the store holds no samples or pods: nothing to analyse (ingest a bundle first)")
        end = _next_hour(last_ts)
        if first_ts is not None:
            return max(end - length, min(first_ts.replace(minute=0, second=0, microsecond=0), end)), end
    return end - length, end


def params(start: datetime, end: datetime, **overrides: Any) -> dict[str, Any]:
    """Every analysis parameter: the defaults, the window, and any overrides."""
    unknown = set(overrides) - set(DEFAULTS) - set(OPTIONS)
    if unknown:
        raise KeyError(f"unknown analysis parameter(s): {', '.join(sorted(unknown))}")
    return {**DEFAULTS, **OPTIONS, **overrides, "start": start, "end": end}


def _next_hour(ts: datetime) -> datetime:
    """The first whole hour strictly after ``ts`` (the window end is exclusive)."""
    base = ts.replace(minute=0, second=0, microsecond=0)
    hours = math.floor((ts - base).total_seconds() / 3600) + 1
    return base + timedelta(hours=hours)
