"""Findings: every analysis and the recommendations over one window, assembled once for every consumer.

``gpuwatch analyze`` (findings/command.py), the weekly report, the app and the findings exporter
(findings/exporter.py) all call ``findings``: each analysis runs once, in dependency order, and an
analysis that needs another's result is handed it (chargeback prices stranded MIG capacity from
mig_fragmentation, so the placement search runs once per window). The recommendations are derived
from the same frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gpuwatch import analyses, recommendations, recommendations_failures, recommendations_topology
from gpuwatch.findings import judgement

# Every finding, in the order consumers list them; "recommendations" is derived, not a SQL analysis.
FAILURES = ("mig_mismatch", "driver_drift", "orphaned_memory", "gang_stall", "unhealthy_gpu")
TOPOLOGY = ("topology_placement", "schedulable_capacity", "blocked_demand")
ALL = ("utilization", "idle_hoarding", "false_utilization", "busy_without_work", "mig_fragmentation", "fragmentation_fgd", "chargeback",
       "rightsizing", "prices", *FAILURES, *TOPOLOGY, "recommendations", "judgement")
# finding -> {keyword: what it takes}. A source is the analysis whose result it is handed, or a signal
# (gpuwatch/signals.py) it judges with: ``signal:<name>`` = without that evidence the finding is not
# judged (never "none found"); ``partial:<name>`` = without it the finding is judged on less evidence
# and says so. ``judgement`` derives each finding's state from the store's coverage of every signal.
NEEDS: dict[str, dict[str, str]] = {
    "utilization": {"reported": "signal:reported"},
    "idle_hoarding": {"reported": "signal:reported", "effective": "partial:sm_active", "pods": "partial:ksm_pods"},
    "false_utilization": {"reported": "signal:reported", "effective": "signal:sm_active"},
    # the default counters' partial evidence where SM activity is missing, under its own name
    "busy_without_work": {"reported": "signal:reported", "tensor": "signal:tensor_active", "dram": "signal:dram_active"},
    "chargeback": {"fragmentation": "mig_fragmentation", "prices": "signal:prices", "teams": "partial:teams"},
    "rightsizing": {"memory": "signal:fb_used", "compute": "signal:sm_active", "prices": "signal:prices"},
    "prices": {"prices": "signal:prices"},
    "mig_mismatch": {"status": "signal:ksm_status", "memory": "partial:fb_used"},
    "driver_drift": {"status": "signal:ksm_status", "pool": "partial:ksm_nodes"},
    "orphaned_memory": {"processes": "signal:processes"},
    "gang_stall": {"status": "signal:ksm_status", "requests": "signal:ksm_requests", "gang": "partial:ksm_labels"},
    "unhealthy_gpu": {"health": "signal:health"},
    "topology_placement": {"topology": "signal:topology", "traffic": "partial:nvlink"},
    "schedulable_capacity": {"topology": "partial:topology"},
    "blocked_demand": {"pending": "signal:pending", "requests": "signal:ksm_requests", "topology": "signal:topology"},
    "recommendations": {"idle": "idle_hoarding", "false_util": "false_utilization", "rightsizing": "rightsizing",
                        "mig": "mig_fragmentation", "prices": "prices", "chargeback": "chargeback",
                        "coverage": "data_coverage", **{name: name for name in FAILURES},
                        "topology_placement": "topology_placement", "blocked_demand": "blocked_demand"},
    "judgement": {"coverage": "signal_coverage"},
}
SIGNAL, PARTIAL = "signal:", "partial:"
Runner = Callable[..., Any]


def findings(con: Any, params: dict[str, Any], *, only: Iterable[str] | None = None,
             run: Runner = analyses.run) -> dict[str, Any]:
    """Frames by name for ``only`` (default: all) and what they need, each computed once.

    ``run(con, name, **params)`` computes one analysis (the app passes its cached runner; the
    findings exporter one that isolates failures and returns None). An analysis whose needed
    result is None runs without it (chargeback then searches placements itself)."""
    results: dict[str, Any] = {}
    for name in order(only or ALL):
        needed = {keyword: results.get(source) for keyword, source in inputs(name).items()}
        if name == "recommendations":
            results[name] = _recommend(params, **needed)
        elif name == "judgement":
            results[name] = judgement.judge(needed["coverage"], NEEDS, ALL)
        else:
            results[name] = run(con, name, **params, **{k: v for k, v in needed.items() if v is not None})
    return results


def order(names: Iterable[str]) -> list[str]:
    """``names`` and everything they need, each once, needs first (then in ``ALL`` order)."""
    out: list[str] = []

    def visit(name: str) -> None:
        for source in inputs(name).values():
            visit(source)
        if name not in out:
            out.append(name)
    for name in sorted(set(names), key=lambda n: ALL.index(n) if n in ALL else len(ALL)):
        visit(name)
    return out


def inputs(name: str) -> dict[str, str]:
    """keyword -> the analysis whose result ``name`` is handed (its NEEDS less the signals)."""
    return {k: v for k, v in NEEDS.get(name, {}).items() if not v.startswith((SIGNAL, PARTIAL))}


def too_small(mismatch: Any) -> Any:
    """The mig_mismatch rows every "too small" figure counts ("MIG/GPU too small" in the CLI, "Burnt by
    too-small slices" in the app): runs that failed at their device's memory limit (cause gpu_memory).
    OOMKilled runs (host_memory) ran out of the node's memory, not the slice's: never in that figure."""
    return mismatch[mismatch["cause"] == "gpu_memory"]


def observed_hours(coverage: Any, start: Any, end: Any) -> float | None:
    """Hours of [start, end) the store holds samples for (first sample .. one step past the last), or
    None when unknown (no coverage frame or no samples)."""
    import pandas as pd

    if coverage is None or not len(coverage) or pd.isna(coverage.iloc[0]["first_ts"]):
        return None
    row = coverage.iloc[0]
    step = pd.Timedelta(seconds=float(row["step_seconds"]) if pd.notna(row["step_seconds"]) else 0.0)
    low, high = max(pd.Timestamp(start), pd.Timestamp(row["first_ts"])), min(pd.Timestamp(end), pd.Timestamp(row["last_ts"]) + step)
    return max((high - low).total_seconds() / 3600, 0.0) or None


def _recommend(params: dict[str, Any], *, chargeback: Any = None, coverage: Any = None, **frames: Any):
    failures = {name: frames.pop(name, None) for name in FAILURES}
    placement, blocked = frames.pop("topology_placement", None), frames.pop("blocked_demand", None)
    observed = observed_hours(coverage, params["start"], params["end"])
    # chargeback bills the GPUs only while they exist (docs/architecture.md#billing): its stranded cost
    # spans the hours the data covers, not a window wider than the data
    hours = observed or (params["end"] - params["start"]).total_seconds() / 3600
    stranded = None
    if chargeback is not None and len(chargeback):
        stranded = float(chargeback.loc[chargeback["kind"] == "stranded", "cost_usd"].sum())
    return recommendations.recommend(**frames, stranded_usd=stranded, window_hours=hours,
                                     observed_hours=observed,
                                     hours_per_month=params["hours_per_month"],
                                     more=lambda rate: recommendations_failures.rows(rate=rate, **failures)
                                     + recommendations_topology.rows(rate=rate, topology_placement=placement,
                                                                     blocked_demand=blocked))
