"""Recommendations (pure): analysis frames in, one frame of actions with evidence and savings out.

Kinds: ``reclaim_idle`` (hoarders), ``rightsize_mig`` (a smaller MIG profile fits), ``repack_mig``
(mig_fragmentation found a layout that strands less) and ``investigate_false_util`` (busy-looking,
SM-idle pods). Each has a stable ``id`` (hash of kind, namespace, pod or GPU), so the reclaim
controller and the app can follow one recommendation across runs. No I/O, no clock.
"""

from __future__ import annotations

import hashlib

from gpuwatch import mig as mig_geometry
from gpuwatch import units

COLUMNS = ("id", "kind", "namespace", "pod", "team", "node", "evidence", "monthly_savings_usd",
           "gpu_uuid", "target", "usd_per_hour", "idle_since")



def recommend(*, idle=None, false_util=None, rightsizing=None, mig=None, prices=None,
              window_hours: float = 168.0, hours_per_month: float = units.HOURS_PER_MONTH):
    """Every recommendation, biggest monthly saving first; any input frame may be None or empty."""
    import pandas as pd

    rows = (reclaim_idle(idle, hours_per_month=hours_per_month)
            + rightsize_mig(rightsizing, exclude=_hoarders(idle))
            + repack_mig(mig, prices=prices, hours_per_month=hours_per_month)
            + investigate_false_util(false_util, window_hours=window_hours, hours_per_month=hours_per_month))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    frame["monthly_savings_usd"] = frame["monthly_savings_usd"].astype(float).round(2)
    return frame.sort_values(["monthly_savings_usd", "id"], ascending=[False, True], kind="stable").reset_index(drop=True)


def stable_id(kind: str, namespace: str | None, subject: str | None) -> str:
    """Same kind + namespace + pod (or GPU) -> same id, in every run."""
    return hashlib.sha1(f"{kind}|{namespace or ''}|{subject or ''}".encode()).hexdigest()[:12]


def reclaim_idle(idle, *, hours_per_month: float = units.HOURS_PER_MONTH) -> list[dict]:
    """Hoarders still holding their GPUs: give them back. Saving = the pod's rate x its idle share, per month."""
    out = []
    for r in _records(idle, "hoarder"):
        if _present(r.get("end_ts")) and not r.get("reclaimable_now"):
            continue  # the pod already ended: nothing left to reclaim (chargeback still shows the waste)
        rate = _num(r.get("usd_per_hour"))
        since = r.get("idle_since")
        held = _num(r.get("max_fb_used_bytes_idle")) / units.GIB
        evidence = (f"idle {r['idle_share']:.0%} of {_num(r.get('observed_gpu_hours')):.1f} observed GPU-hours"
                    + (f"; idle since {_iso(since)}" if _present(since) else "")
                    + f"; holds {held:.1f} GiB while idle; ${rate:.2f}/hour")
        out.append(_row("reclaim_idle", r, evidence=evidence, savings=rate * _num(r["idle_share"]) * hours_per_month,
                        usd_per_hour=rate, idle_since=since if _present(since) else None))
    return out


def rightsize_mig(rightsizing, *, exclude: set | frozenset = frozenset()) -> list[dict]:
    """Whole-GPU pods that fit a MIG profile (hoarders excluded: reclaim them instead)."""
    out = []
    for r in _records(rightsizing):
        if (r["namespace"], r["pod"]) in exclude or _num(r.get("monthly_savings_usd")) <= 0:
            continue
        evidence = (f"peak memory {_num(r['peak_fb_used_bytes']) / units.GIB:.1f} GiB, SM activity p"
                    f"95 {_num(r['sm_active_quantile']):.0%}: fits {r['profile']} "
                    f"(${_num(r['current_usd_per_hour']):.2f}/h -> ${_num(r['target_usd_per_hour']):.2f}/h)")
        out.append(_row("rightsize_mig", r, evidence=evidence, savings=_num(r["monthly_savings_usd"]),
                        target=r["profile"], usd_per_hour=_num(r["current_usd_per_hour"])))
    return out


def repack_mig(mig, *, prices=None, hours_per_month: float = units.HOURS_PER_MONTH) -> list[dict]:
    """MIG GPUs whose free slices are stranded and a repack exists (mig_fragmentation's repack columns)."""
    price = {} if prices is None else dict(zip(prices["gpu_model"], prices["usd_per_gpu_hour"], strict=False))
    out = []
    for r in _records(mig):
        repack = r.get("repack_layout") if "repack_layout" in r else r.get("repack")
        stranded = _num(r.get("stranded_slices"))
        if not _present(repack) or stranded <= 0 or (_present(r.get("repack_stranded_slices"))
                                                      and _num(r["repack_stranded_slices"]) >= stranded):
            continue
        recovered = stranded - _num(r.get("repack_stranded_slices"))
        savings = recovered / mig_geometry.MEMORY_SLICES * _num(price.get(r.get("gpu_model"))) * hours_per_month
        evidence = f"{stranded:.0f} of {mig_geometry.MEMORY_SLICES} memory slices stranded ({r.get('instances', '')}); repack to {repack}"
        row = _row("repack_mig", {**r, "namespace": None, "pod": None, "team": None}, evidence=evidence,
                   savings=savings, target=repack, subject=r["gpu_uuid"])
        out.append(row)
    return out


def investigate_false_util(false_util, *, window_hours: float, hours_per_month: float = units.HOURS_PER_MONTH) -> list[dict]:
    """Pods that look busy but whose SMs idle: the gap between reported and effective is the signal."""
    out = []
    for r in _records(false_util, "offender"):
        evidence = (f"reported utilization {_num(r['mean_reported']):.0%} vs effective (SM active) "
                    f"{_num(r['mean_effective']):.0%}; {_num(r['false_share']):.0%} of judged time falsely busy")
        savings = _num(r.get("false_util_cost_usd")) / max(window_hours, 1e-9) * hours_per_month
        out.append(_row("investigate_false_util", r, evidence=evidence, savings=savings,
                        usd_per_hour=_num(r.get("usd_per_hour"))))
    return out


def _row(kind: str, r: dict, *, evidence: str, savings: float, subject: str | None = None, **extra) -> dict:
    row = dict.fromkeys(COLUMNS)
    row.update(kind=kind, namespace=r.get("namespace"), pod=r.get("pod"), team=r.get("team"), node=r.get("node"),
               gpu_uuid=r.get("gpu_uuid"), evidence=evidence, monthly_savings_usd=savings, **extra)
    row["id"] = stable_id(kind, r.get("namespace"), subject or r.get("pod"))
    return row


def _records(frame, flag: str | None = None) -> list[dict]:
    if frame is None or not len(frame):
        return []
    if flag is not None:
        frame = frame[frame[flag].fillna(False).astype(bool)]
    return frame.to_dict("records")


def _hoarders(idle) -> set:
    return {(r["namespace"], r["pod"]) for r in _records(idle, "hoarder")}


def _num(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if number != number else number


def _present(value) -> bool:
    return value is not None and value == value and str(value) not in ("", "NaT", "None")


def _iso(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if hasattr(value, "strftime") else str(value)
