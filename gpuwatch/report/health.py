"""The weekly report's Health & fit section: the failure-mode findings as one list per page (pure)."""

from __future__ import annotations


def failure_rows(frames: dict, *, team: str | None, namespaces: set | None = None) -> list[dict]:
    """The failure-mode findings (Health & fit) as one list, costliest first: the team's own (its pods'
    MIG mismatches, GPUs with events under its pods, its jobs' stalls), or every one on the fleet page."""
    mine = team is not None
    out = []
    for r in _rows(frames.get("mig_mismatch"), (lambda f: f["team"] == team) if mine else None):
        out.append({"finding": "MIG/GPU too small" if r["cause"] == "gpu_memory" else "host memory (OOMKilled)",
                    "subject": f"{r['namespace']}/{r['pod']}", "usd": r["usd_burnt"],
                    "detail": f"{r['failed_runs']:.0f} failed runs on {r['mig_profile'] or 'a whole GPU'}"
                              + (f"; fits {r['recommended_profile']}" if r["cause"] == "gpu_memory" else "")})
    under = (lambda f: f["teams"].fillna("").str.split(",").apply(lambda teams: team in teams)) if mine else None
    for r in _rows(frames.get("unhealthy_gpu"), under):
        out.append({"finding": f"unhealthy GPU ({r['severity']})", "subject": f"{r['node']} {r['gpu_uuid']}",
                    "usd": r["allocated_usd_at_risk"], "detail": f"{r['kind']} {_code(r['code'])}; pods {r['pods'] or 'none'}"})
    for r in _rows(frames.get("gang_stall"), (lambda f: f["namespace"].isin(namespaces or set())) if mine else None):
        out.append({"finding": "gang stall" if r["kind"] == "partial_allocation" else "straggler",
                    "subject": f"{r['namespace']}/{r['job']}", "usd": r["usd_held_idle"], "detail": r["recommendation"]})
    if not mine:  # node-level findings belong to the platform team: the fleet page
        for r in _rows(frames.get("orphaned_memory"), None):
            out.append({"finding": "orphaned memory", "subject": f"{r['node']} {r['gpu_uuid']}", "usd": r["usd_unusable"],
                        "detail": f"held {_hours(r['seconds'])} with no pod"})
        for r in _rows(frames.get("driver_drift"), lambda f: f["blamed"].fillna(False).astype(bool)):
            out.append({"finding": "driver drift", "subject": f"{r['pool']} driver {r['driver_version']}",
                        "usd": r["usd_lost"], "detail": r["recommendation"]})
    return sorted(out, key=lambda r: -_money(r["usd"]))


def _rows(frame, keep=None) -> list[dict]:
    """``frame``'s rows (those ``keep`` selects), as records; none for a missing frame."""
    if frame is None or not len(frame):
        return []
    return (frame[keep(frame).fillna(False).astype(bool)] if keep is not None else frame).to_dict("records")


def _money(value) -> float:
    return 0.0 if value is None or value != value else float(value)


def _code(value) -> str:
    return "" if value is None or value != value else f"{int(value)}"


def _hours(seconds) -> str:
    return f"{float(seconds) / 3600:.1f} h"
