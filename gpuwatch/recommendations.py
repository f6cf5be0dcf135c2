"""Recommendations (pure): analysis frames in, one frame of actions with evidence and savings out.

Kinds: ``reclaim_idle`` (hoarders reclaimable now; ``investigate_hoarder``: still holding, busy at the
window's end), ``rightsize_mig`` (a smaller MIG profile fits), ``repack_mig``
(mig_fragmentation found a layout that strands less) and ``investigate_false_util`` (busy-looking,
SM-idle pods). Each has a stable ``id`` (hash of kind, namespace, pod or GPU), so the reclaim
controller and the app can follow one recommendation across runs. No I/O, no clock.

Savings are the observed run-rate of the waste an action removes, never a projection of a price
(docs/architecture.md#savings): ``monthly_waste_usd`` = the waste measured in the window's observed
hours / those hours x ``hours_per_month``; ``monthly_savings_usd`` <= it (equal where the action
removes all of it, a share for a partial repack, 0 for ``investigate_*``, whose waste is at stake
but not counted). The same data gives the same figures whatever window holds it. A pod still holding
its GPUs is credited its own rate (its idle cost per hour it was observed: gpuwatch/idle_bridge.py),
so a window longer than the pod's life does not dilute what giving its GPUs back saves.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from gpuwatch import idle_bridge, units
from gpuwatch import mig as mig_geometry

COLUMNS = ("id", "kind", "namespace", "pod", "team", "node", "evidence", "monthly_savings_usd",
           "action", "monthly_waste_usd", "counted", "basis", "gpu_uuid", "target", "usd_per_hour", "idle_since")
# Kinds whose waste is at stake but whose saving is not claimed (a person must look first).
NOT_COUNTED = ("investigate_false_util", "investigate_hoarder")


def recommend(*, idle=None, false_util=None, rightsizing=None, mig=None, prices=None, stranded_usd: float | None = None,
              window_hours: float = 168.0, observed_hours: float | None = None,
              hours_per_month: float = units.HOURS_PER_MONTH, more: Callable[[RunRate], list[dict]] | None = None):
    """Every recommendation, biggest monthly saving first; any input frame may be None or empty.

    ``observed_hours``: the hours of the window the store holds data for (default: the window);
    every waste measured in the window becomes a monthly run-rate over them. ``stranded_usd``: the
    chargeback's stranded MIG cost over the ``window_hours`` window, which caps what repacks can save
    (None: priced from the stranded slices alone). ``more(rate)``: further rows at the same run-rate
    (recommendations_failures.rows)."""
    import pandas as pd

    rate = RunRate(hours=observed_hours or window_hours, hours_per_month=hours_per_month)
    rows = (reclaim_idle(idle, rate=rate)
            + rightsize_mig(rightsizing, exclude=_hoarders(idle), rate=rate)
            + repack_mig(mig, prices=prices, rate=rate, stranded_usd=stranded_usd, window_hours=window_hours)
            + investigate_false_util(false_util, rate=rate)
            + (more(rate) if more is not None else []))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    for column in ("monthly_savings_usd", "monthly_waste_usd"):
        frame[column] = frame[column].astype(float).round(2)
    frame["counted"] = frame["counted"].astype(bool)
    return frame.sort_values(["monthly_savings_usd", "monthly_waste_usd", "id"], ascending=[False, False, True],
                             kind="stable").reset_index(drop=True)


class RunRate:
    """Waste measured over ``hours`` observed hours -> USD per month at the same rate."""

    def __init__(self, *, hours: float, hours_per_month: float):
        self.hours = max(float(hours), 1e-9)
        self.hours_per_month = hours_per_month

    def monthly(self, usd: float) -> float:
        return usd / self.hours * self.hours_per_month

    def basis(self, what: str, usd: float) -> str:
        return (f"{what} ${usd:,.2f} over {self.hours:,.1f} observed hours, "
                f"at that rate for {self.hours_per_month:g} h/month")


def totals(recs) -> dict[str, float]:
    """The figures every page quotes: counted savings, waste at stake in investigate items, all waste."""
    if recs is None or not len(recs):
        return {"savings": 0.0, "at_stake": 0.0, "waste": 0.0}
    counted = recs["counted"].astype(bool)
    return {"savings": round(float(recs["monthly_savings_usd"].sum()), 2),
            "at_stake": round(float(recs.loc[~counted, "monthly_waste_usd"].sum()), 2),
            "waste": round(float(recs["monthly_waste_usd"].sum()), 2)}


def stable_id(kind: str, namespace: str | None, subject: str | None) -> str:
    """Same kind + namespace + pod (or GPU) -> same id, in every run."""
    return hashlib.sha1(f"{kind}|{namespace or ''}|{subject or ''}".encode()).hexdigest()[:12]


def reclaim_idle(idle, *, rate: RunRate) -> list[dict]:
    """Hoarders still holding their GPUs (idle_bridge steps 3-5). Reclaimable now: give them back,
    saving the pod's own idle run-rate (idle_bridge.pod_run_rate; the bridge's step 5 sums these).
    Busy at the window's end: ask the owner, at stake and not counted (nothing can be given back now)."""
    out = []
    frame = None if idle is None or not len(idle) else idle
    holding = set() if frame is None else set(frame.index[idle_bridge.held_at_end(frame)])
    for index, r in ([] if frame is None else list(zip(frame.index, frame.to_dict("records"), strict=True))):
        if not (flag(r.get("hoarder")) and (flag(r.get("reclaimable_now")) or index in holding)):
            continue  # the pod already ended: nothing left to reclaim (chargeback still shows the waste)
        hourly = number(r.get("usd_per_hour"))
        rate_text = f"${hourly:.2f}/hour" if present(r.get("usd_per_hour")) else "unpriced"  # unknown, not $0.00
        since = r.get("idle_since")
        held = number(r.get("max_fb_used_bytes_idle")) / units.GIB
        evidence = (f"idle {r['idle_share']:.0%} of {number(r.get('observed_gpu_hours')):.1f} observed GPU-hours"
                    + (f"; idle since {_iso(since)}" if present(since) else "")
                    + f"; holds {held:.1f} GiB while idle; {rate_text}")
        gpus = number(r.get("gpu_count"))
        what = f"{gpus:g} GPU(s)" if gpus > 0 else "the GPU(s)"
        waste, basis = idle_bridge.pod_run_rate(r, rate.hours_per_month), idle_bridge.pod_basis(r, rate.hours_per_month)
        if flag(r.get("reclaimable_now")):
            out.append(row("reclaim_idle", r, evidence=evidence, waste=waste, share=1.0, basis=basis,
                            action=f"Give back {what} held idle by {who(r)}",
                            usd_per_hour=hourly, idle_since=since if present(since) else None))
        else:
            out.append(row("investigate_hoarder", r, evidence=evidence + "; busy at the window's end",
                            waste=waste, share=0.0, basis=basis + "; at stake, not counted as savings",
                            action=f"Ask the owner of {who(r)} to give back {what} it keeps idle most of the time",
                            usd_per_hour=hourly))
    return out


def rightsize_mig(rightsizing, *, exclude: set | frozenset = frozenset(), rate: RunRate) -> list[dict]:
    """Whole-GPU pods that fit a MIG profile (hoarders excluded: reclaim them instead). Waste = the
    price difference over the hours the pod was observed."""
    out = []
    for r in records(rightsizing):
        excess = number(r.get("current_usd_per_hour")) - number(r.get("target_usd_per_hour"))
        if (r["namespace"], r["pod"]) in exclude or excess <= 0:
            continue
        waste = excess * number(r.get("observed_seconds")) / units.SECONDS_PER_HOUR
        evidence = (f"peak memory {number(r['peak_fb_used_bytes']) / units.GIB:.1f} GiB, SM activity p"
                    f"95 {number(r['sm_active_quantile']):.0%}: fits {r['profile']} "
                    f"(${number(r['current_usd_per_hour']):.2f}/h -> ${number(r['target_usd_per_hour']):.2f}/h)")
        out.append(row("rightsize_mig", r, evidence=evidence, waste=rate.monthly(waste), share=1.0,
                        basis=rate.basis("cost above the smaller profile", waste),
                        action=f"Move {who(r)} from a whole GPU to a {r['profile']} MIG instance",
                        target=r["profile"], usd_per_hour=number(r["current_usd_per_hour"])))
    return out


def repack_mig(mig, *, prices=None, rate: RunRate, stranded_usd: float | None = None,
               window_hours: float = 168.0) -> list[dict]:
    """MIG GPUs whose free slices are stranded and a repack exists (mig_fragmentation's repack columns).

    Waste = the GPU's stranded slices at its price over the observed hours; where the chargeback's
    stranded cost is given, the GPUs' wastes are scaled to sum to it (one definition of stranded).
    Saving = the share of the stranded slices the repack frees."""
    price = {} if prices is None else dict(zip(prices["gpu_model"], prices["usd_per_gpu_hour"], strict=False))
    stranded_rows = [r for r in records(mig) if number(r.get("stranded_slices")) > 0]
    weights = {r["gpu_uuid"]: number(r["stranded_slices"]) / mig_geometry.MEMORY_SLICES * number(price.get(r.get("gpu_model")))
               for r in stranded_rows}
    # the chargeback prices stranded capacity over the hours the GPUs existed (window_hours: the observed
    # ones): compare per hour
    scale = (stranded_usd / max(window_hours, 1e-9) / max(sum(weights.values()), 1e-9)
             if stranded_usd is not None else 1.0)
    out = []
    for r in stranded_rows:
        repack = r.get("repack_layout") if "repack_layout" in r else r.get("repack")
        stranded = number(r.get("stranded_slices"))
        if not present(repack) or (present(r.get("repack_stranded_slices"))
                                    and number(r["repack_stranded_slices"]) >= stranded):
            continue
        recovered = stranded - number(r.get("repack_stranded_slices"))
        waste = weights[r["gpu_uuid"]] * rate.hours * min(scale, 1.0)
        moves = number(r.get("repack_moves"))
        evidence = (f"{stranded:.0f} of {mig_geometry.MEMORY_SLICES} memory slices stranded ({r.get('instances', '')}); "
                    f"repack to {repack}")
        action = (f"Re-create the MIG instances of GPU {r['gpu_uuid']} on {r.get('node')} as {repack}"
                  + (f" ({moves:.0f} instance(s) move)" if moves > 0 else "") + f", freeing {recovered:.0f} slice(s)")
        out.append(row("repack_mig", {**r, "namespace": None, "pod": None, "team": None}, evidence=evidence,
                        waste=rate.monthly(waste), share=recovered / stranded,
                        basis=rate.basis("stranded MIG capacity", waste), action=action, target=repack,
                        subject=r["gpu_uuid"]))
    return out


def investigate_false_util(false_util, *, rate: RunRate) -> list[dict]:
    """Pods that look busy but whose SMs idle: the gap between reported and effective is the signal.
    The false-util cost is waste at stake, not a saving: a person must look before anything changes."""
    out = []
    for r in records(false_util, "offender"):
        evidence = (f"reported utilization {number(r['mean_reported']):.0%} vs effective (SM active) "
                    f"{number(r['mean_effective']):.0%}; {number(r['false_share']):.0%} of judged time falsely busy")
        waste = number(r.get("false_util_cost_usd"))
        out.append(row("investigate_false_util", r, evidence=evidence, waste=rate.monthly(waste), share=0.0,
                        basis=rate.basis("falsely busy cost", waste) + "; at stake, not counted as savings",
                        action=f"Ask the owner of {who(r)} why its GPUs report busy while the SMs idle",
                        usd_per_hour=number(r.get("usd_per_hour"))))
    return out


def row(kind: str, r: dict, *, evidence: str, waste: float, share: float, subject: str | None = None,
        not_counted: tuple[str, ...] = NOT_COUNTED, **extra) -> dict:
    """One recommendation: its saving is ``share`` of the waste it addresses (never more); kinds in
    ``not_counted`` are at stake only (saving 0)."""
    out = dict.fromkeys(COLUMNS)
    counted = kind not in not_counted
    out.update(kind=kind, namespace=r.get("namespace"), pod=r.get("pod"), team=r.get("team"), node=r.get("node"),
               gpu_uuid=r.get("gpu_uuid"), evidence=evidence, monthly_waste_usd=waste, counted=counted,
               monthly_savings_usd=waste * min(max(share, 0.0), 1.0) if counted else 0.0, **extra)
    out["id"] = stable_id(kind, r.get("namespace"), subject or r.get("pod"))
    return out


def records(frame, flag: str | None = None) -> list[dict]:
    if frame is None or not len(frame):
        return []
    if flag is not None:
        frame = frame[frame[flag].fillna(False).astype(bool)]
    return frame.to_dict("records")


def who(r: dict) -> str:
    owner = f" ({r['team']})" if present(r.get("team")) and r.get("team") != r.get("namespace") else ""
    return f"{r.get('namespace')}/{r.get('pod')}{owner}"


def _hoarders(idle) -> set:
    return {(r["namespace"], r["pod"]) for r in records(idle, "hoarder")}


def flag(value) -> bool:
    try:
        return present(value) and bool(value)
    except TypeError:  # pandas' NA: unknown is not true
        return False


def number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if number != number else number


def present(value) -> bool:
    return value is not None and value == value and str(value) not in ("", "NaT", "None")


def _iso(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if hasattr(value, "strftime") else str(value)
