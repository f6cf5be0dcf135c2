"""Plain-text output of a pass: the decisions table and the counterfactual summary."""

from __future__ import annotations

from typing import Any

from gpuwatch import idle_bridge
from gpuwatch.reclaim import audit
from gpuwatch.reclaim.controller import Result

_ORDER = {"acted": 0, "would_act": 0, "warned": 1, "would_warn": 1, "cleared": 2, "restored": 2, "skipped": 3}


def render(result: Result, *, apply: bool) -> str:
    """What this pass decided, with reasons, and whether the cluster was consulted."""
    mode = "APPLY" if apply else "DRY-RUN (nothing written to the cluster; --apply to act)"
    lines = [f"gpuwatch reclaim — {mode} — run {result.run_id} at {result.now:%Y-%m-%d %H:%M:%S} UTC"]
    if not result.cluster_consulted:
        lines.append(f"NOTE: the cluster was NOT consulted ({result.note}). Pods, owners and priority "
                     "classes come from the store's pods table; opt-in from the policy's namespaces or "
                     "--assume-opted-in; exemption annotations and earlier warnings are unknown.")
    elif result.note:
        lines.append(f"NOTE: {result.note}")
    rows = sorted(result.rows, key=lambda r: (_ORDER.get(r["decision"], 9), r["namespace"], r["pod"]))
    header = ("decision", "action", "namespace/pod", "owner", "team", "gpus", "$/h", "reason")
    table = [header] + [(r["decision"], r["action"], f"{r['namespace']}/{r['pod']}",
                         f"{r['owner_kind']}/{r['owner_name']}", r["team"], f"{r['gpu_count']:g}",
                         f"{r['usd_per_hour']:.2f}", _reason(r)) for r in rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header) - 1)]
    for row in table:
        lines.append("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])
    lines.append(_totals(result.rows))
    if result.findings is not None and len(result.findings):
        lines.append(_bridge(result.findings, result.rows))
    return "\n".join(lines)


def counterfactual(con: Any, *, start, end) -> str:
    """'Would have reclaimed N GPU-hours = $X' from the dry-run audit over [start, end)."""

    frame = audit.counterfactual(con, start=start, end=end)
    hours, usd = float(frame["gpu_hours"].sum()), float(frame["usd"].sum())
    lines = [f"Counterfactual {start:%Y-%m-%d %H:%M} – {end:%Y-%m-%d %H:%M} UTC: would have reclaimed "
             f"{hours:.1f} GPU-hours = ${usd:,.2f} across {len(frame)} workloads "
             f"({int(frame['stops'].sum())} stops)"]
    if frame.empty or hours == 0:
        lines.append("  (savings accrue between dry-run passes: run the loop dry for a week, or "
                     "`gpuwatch reclaim --replay 1h --db ...` over stored data)")
        return "\n".join(lines)
    for r in frame.head(10).itertuples():
        lines.append(f"  {r.namespace}/{r.owner_kind}/{r.owner_name} ({r.team}): "
                     f"{r.gpu_hours:.1f} GPU-h = ${r.usd:,.2f}")
    return "\n".join(lines)


def _bridge(findings: Any, rows: list[dict]) -> str:
    """Where this pass sits on the idle bridge (gpuwatch/idle_bridge.py): its step 4 is what the policy
    chose from."""
    import pandas as pd

    steps = idle_bridge.bridge(findings if isinstance(findings, pd.DataFrame) else pd.DataFrame(findings))
    acting = {(r["namespace"], r["pod"]) for r in rows if r["decision"] in ("acted", "would_act")}
    # step 4 is judged at the data's end, whatever window the pass read: the same pods as `analyze` shows
    return (f"Idle bridge step 4: {steps.reclaimable_pods} pods reclaimable now ({steps.reclaimable_gpus:g} GPUs = "
            f"{idle_bridge.money(steps.reclaimable_usd_per_hour)}/h); this pass acts on {len(acting)} of them, the policy skips "
            "or warns the rest (reasons above).")


def _reason(row: dict) -> str:
    return row["reason"] + (f" [{row['detail']}]" if row["detail"] else "")


def _totals(rows: list[dict]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["decision"]] = counts.get(r["decision"], 0) + 1
    acting = [r for r in rows if r["decision"] in ("acted", "would_act")]
    gpus = sum(r["gpu_count"] for r in acting)
    usd = sum(r["usd_per_hour"] for r in acting)
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no decisions"
    return f"{summary}. Acting now frees {gpus:g} GPUs = ${usd:,.2f}/h."
