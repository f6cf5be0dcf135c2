"""The bundle contract's rules, declared once: required, typed, non-negative and ratio columns, the
sane time range. columns.py turns them into DuckDB checks for every load, files and frames alike.

Bad input is an error naming the file, the column and the (1-based data) row: a missing required
column, an unknown column or file, a value that is not a number or not a timestamp, a negative
count, a ratio above 1, a timestamp outside 2000-01-01 .. now + 1 day. Negative or NaN *readings*
(samples) are not errors: staging turns them into NULL (unknown).
"""

from __future__ import annotations

from datetime import UTC, datetime

from gpuwatch.model import BUNDLE_COLUMNS
from gpuwatch.units import DataError

REQUIRED = {
    "devices": ("node", "gpu_uuid", "gpu_model"),
    "samples": ("ts", "node", "gpu_uuid"),
    "pods": ("namespace", "pod", "gpu_count"),
    "prices": ("gpu_model", "usd_per_gpu_hour"),
    "teams": ("namespace", "team"),
    "nodes": ("node",),
    "pod_status": ("ts", "namespace", "pod"),
    "health": ("ts", "node", "gpu_uuid", "kind"),
    "topology": ("node", "gpu_uuid", "peer_gpu_uuid", "link"),
    "processes": ("ts", "node", "gpu_uuid", "pid"),
    "scheduler_pending": ("ts", "scheduler", "unit"),
}
TIMESTAMPS = {"samples": ("ts",), "pods": ("start_ts", "end_ts"), "pod_status": ("ts", "created_ts", "scheduled_ts"),
              "health": ("ts",), "processes": ("ts",), "scheduler_pending": ("ts",)}
INTEGERS = {
    "devices": ("gpu_index", "fb_total_bytes", "mig_gi_id", "mig_profile_id", "mig_placement_start",
                "mig_placement_size", "numa_node"),
    "samples": ("mig_gi_id",),
    "pod_status": ("restarts", "last_exit_code", "unschedulable"),
    "health": ("code",),
    "topology": ("nvlinks",),
    "processes": ("mig_gi_id", "pid", "in_pod"),
}
FLOATS = {
    "samples": BUNDLE_COLUMNS["samples"][7:],
    "pods": ("gpu_count",),
    "prices": ("usd_per_gpu_hour",),
    "pod_status": ("gpu_request",),
    "processes": ("fb_used_bytes",),
    "scheduler_pending": ("pending",),
}
# Counts, sizes and prices: a negative value is a broken bundle, not a reading to drop.
NON_NEGATIVE = {"devices": INTEGERS["devices"], "pods": ("gpu_count",), "prices": ("usd_per_gpu_hour",),
                "samples": ("mig_gi_id",), "pod_status": ("restarts", "gpu_request", "unschedulable"), "health": ("code",),
                "topology": ("nvlinks",), "processes": ("mig_gi_id", "pid", "in_pod", "fb_used_bytes"),
                "scheduler_pending": ("pending",)}
# Timestamps from 2000-01-01 to one day after now: milliseconds, seconds in a .prom file, a typo'd
# year or a far-future outlier fall outside and are refused (one of them would move every window).
EARLIEST_EPOCH = 946_684_800.0  # 2000-01-01T00:00:00Z
FUTURE_SLACK_SECONDS = 86_400.0
# Ratio columns are 0-1 (a 5% tolerance for rounding); above the limit is a percent or a broken
# reader, not a reading. SM_ACTIVE may exceed 1 on MIG instances (DCGM reports it so): on rows with a
# mig_gi_id it may reach MIG_SM_ACTIVE_LIMIT, and staging clamps and counts those.
RATIO_LIMITS = {"gpu_util": 1.05, "gr_engine_active": 1.05, "sm_occupancy": 1.05, "tensor_active": 1.05,
                "dram_active": 1.05, "sm_active": 1.05}
MIG_SM_ACTIVE_LIMIT = 1.5
# Upper bounds that no real value reaches: a price or a GPU count above them is a unit slip or a
# typo (and 1e20 would make cent rounding meaningless). Non-finite values are refused too.
UPPER_BOUNDS = {("prices", "usd_per_gpu_hour"): 1000.0, ("pods", "gpu_count"): 4096.0,
                ("pod_status", "gpu_request"): 4096.0,
                ("pod_status", "unschedulable"): 1.0, ("topology", "nvlinks"): 64.0,
                ("processes", "in_pod"): 1.0}
BOUND_MESSAGE = "{raw} is not a plausible value (finite, at most {bound:g})"
RATIO_MESSAGE = "{raw} is above 1: ratio columns hold 0-1 (a percent must be converted by its reader)"
TS_MESSAGE = "bad timestamp {raw}: outside 2000-01-01 .. now + 1 day (epoch seconds expected; milliseconds?)"
FLOAT32_MESSAGE = "holds float32 epoch seconds, which are off by up to a minute today; write float64 or integers"


def latest_epoch() -> float:
    """The latest acceptable timestamp, epoch seconds: one day after now."""
    return datetime.now(UTC).timestamp() + FUTURE_SLACK_SECONDS


class BundleError(DataError, ValueError):
    """A bundle file that cannot be loaded; the message names file, column and row."""


def check_bundle_name(name: str, *, file: str) -> None:
    """A file or frame that is not a bundle table is an error listing the bundle's tables."""
    if name not in BUNDLE_COLUMNS:
        raise BundleError(f"{file}: unknown bundle file {name!r}; expected one of {', '.join(BUNDLE_COLUMNS)}")


def check_column_names(name: str, columns: list[str], *, file: str) -> None:
    """Unknown or missing required columns: an error naming the file (frames and files alike)."""
    unknown = [c for c in columns if c not in BUNDLE_COLUMNS[name]]
    if unknown:
        raise BundleError(f"{file}: unknown column(s) {', '.join(map(repr, unknown))}; {name} has "
                          f"{', '.join(BUNDLE_COLUMNS[name])} (base units: bytes, ratios 0-1, watts, seconds, USD)")
    missing = [c for c in REQUIRED[name] if c not in columns]
    if missing:
        raise BundleError(f"{file}: missing required column(s) {', '.join(map(repr, missing))}")
