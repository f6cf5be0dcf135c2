"""The ``reclaim_audit`` table: every decision, written by the controller, read by app and report.

Columns are fixed here (``COLUMNS``) and created by store/reclaim_audit.sql. The SQL lives in ``sql/*.sql``; parameters are
bound. ``counterfactual`` turns a dry-run week into "would have reclaimed N GPU-hours = $X".
"""

from __future__ import annotations

from datetime import datetime, timedelta
from importlib import resources
from typing import Any

from gpuwatch import store
from gpuwatch.reclaim.records import Action

COLUMNS = ("ts", "run_id", "decision", "action", "dry_run", "namespace", "pod", "owner_kind",
           "owner_name", "team", "reason", "idle_since", "gpu_count", "usd_per_hour",
           "recommendation_id", "result", "detail")
# plan decision -> audit decision (live, dry-run)
DECISION = {"warn": ("warned", "would_warn"), "act": ("acted", "would_act"),
            "clear": ("cleared", "cleared"), "skip": ("skipped", "skipped")}


def sql(name: str) -> str:
    return resources.files(__package__).joinpath("sql", f"{name}.sql").read_text()


def row(action: Action, *, now: datetime, run_id: str, dry_run: bool, result: str,
        decision: str | None = None, detail: str = "") -> dict:
    """One audit row for ``action``; ``decision`` overrides the mapped one (e.g. a refusal)."""
    mapped = DECISION[action.decision][1 if dry_run else 0]
    pods = ",".join(action.pods) if len(action.pods) > 1 else ""
    return {
        "ts": _naive(now), "run_id": run_id, "decision": decision or mapped,
        "action": action.action if action.decision == "act" else "none", "dry_run": dry_run,
        "namespace": action.namespace, "pod": action.pod, "owner_kind": action.owner_kind,
        "owner_name": action.owner_name, "team": action.team, "reason": action.reason,
        "idle_since": _naive(action.idle_since), "gpu_count": float(action.gpu_count),
        "usd_per_hour": float(action.usd_per_hour), "recommendation_id": action.recommendation_id,
        "result": result, "detail": "; ".join(p for p in (detail, f"pods: {pods}" if pods else "") if p),
    }


def run_row(*, now: datetime, run_id: str, dry_run: bool, reason: str) -> dict:
    """One audit row for a whole pass that decided nothing (e.g. findings of unknown age)."""
    action = Action(decision="skip", action="none", namespace="", pod="", owner_kind="",
                    owner_name="", team="", reason=reason)
    return row(action, now=now, run_id=run_id, dry_run=dry_run, result="skipped")


def ensure_table(con: Any) -> None:
    """Create reclaim_audit when missing (exactly the contract's columns)."""

    store.ensure_reclaim_audit(con)


def write(con: Any, rows: list[dict]) -> int:
    """Append audit rows in one transaction; returns the number written."""
    if not rows:
        return 0
    import pandas as pd

    ensure_table(con)
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for column in ("ts", "idle_since"):
        frame[column] = pd.to_datetime(frame[column])
    con.register("audit_rows", frame)
    try:
        con.execute("BEGIN TRANSACTION")
        con.execute(sql("audit_insert"))
        con.execute("COMMIT")
    finally:
        con.unregister("audit_rows")
    return len(rows)


def recent(con: Any, *, now: datetime, dry_run: bool) -> list[tuple[datetime, str, str]]:
    """Owners already acted on, for plan()'s rate limits: the last hour live; in dry-run the
    last day, so an owner that "was stopped" and stays idle never takes a second slot."""
    ensure_table(con)
    since = _naive(now - (timedelta(days=1) if dry_run else timedelta(hours=1)))
    params = {"since": since, "now": _naive(now), "dry_run": dry_run}
    rows = con.execute(sql("audit_recent"), params).fetchall()
    return [(ts, team or "", key) for ts, team, key in rows]


def counterfactual(con: Any, *, start: datetime, end: datetime):
    """Per owner: how often dry-run would have stopped it, and the GPU-hours and USD saved."""
    ensure_table(con)
    return con.execute(sql("counterfactual"), {"start": _naive(start), "end": _naive(end)}).df()


def _naive(moment: datetime | None) -> datetime | None:
    """DuckDB TIMESTAMP (no zone) holds UTC."""
    if moment is None:
        return None
    return moment.replace(tzinfo=None) if moment.utcoffset() is None else \
        (moment - moment.utcoffset()).replace(tzinfo=None)
