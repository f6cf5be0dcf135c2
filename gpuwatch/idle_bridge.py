"""The idle-GPU bridge (pure): from the idle time in a window to what giving GPUs back saves a month.

Declared once, here; every surface that speaks of idle GPUs reads it: ``gpuwatch analyze``'s summary,
the app's Fleet and Idle hoarding pages, the weekly report, ``gpuwatch export-derived`` and the
``reclaim_idle`` recommendations (docs/architecture.md#the-idle-bridge). From one idle_hoarding frame:

1. **idle in the window**: every allocated pod's idle cost in [start, end) (chargeback's idle, to the cent)
2. **of which hoarders**: pods idle >= ``hoarder_idle_share`` of >= ``min_observed_seconds``, or reclaimable now
3. **still holding GPUs**: hoarders whose GPUs were still sampled at the window's end (``held_at_end``);
   the others ended: nothing is left to give back, their idle cost stays in the chargeback
4. **reclaimable now**: idle >= ``min_idle_run_seconds`` right up to the end: their GPUs and price per hour
   (what the reclaim controller may act on, policy permitting)
5. **run-rate**: each reclaimable pod's idle cost per hour it was observed in the window x ``hours_per_month``

What a window change does: steps 1-3 add up idle cost inside the window (a longer window holds more,
and a pod's idle share, hence whether it is a hoarder, is judged over its time in the window); steps
3-4 are judged at the window's end (the same pods for every window ending there); step 5 is each
pod's own rate, so a window longer than the pod's life does not dilute it, and a shorter window
measures the more recent rate.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuwatch import units
from gpuwatch.analyses import chargeback as chargeback_rules

STEPS = ("idle", "hoarders", "holding", "reclaimable", "run_rate")
WINDOW_EFFECT = {
    "idle": "grows with the window: the idle cost inside it",
    "hoarders": "grows with the window; a pod's idle share is judged over its time in the window",
    "holding": "judged at the window's end; the idle cost is still the window's",
    "reclaimable": "judged at the window's end: the same pods and $/hour for every window ending there",
    "run_rate": "each pod's own idle rate: not diluted by a longer window; a shorter one measures the recent rate",
}


@dataclass(frozen=True)
class Bridge:
    """The five steps. A dollar amount is None when no pod in its step has a known price (unknown, shown
    as "unpriced", never $0.00); ``unpriced_pods``: idle pods whose GPUs have no price (left out of
    every sum, and said so)."""

    idle_pods: int
    idle_usd: float | None
    hoarder_pods: int
    hoarder_usd: float | None
    holding_pods: int
    holding_usd: float | None
    reclaimable_pods: int
    reclaimable_gpus: float
    reclaimable_usd_per_hour: float | None
    run_rate_usd_per_month: float | None
    hours_per_month: float = units.HOURS_PER_MONTH
    unpriced_pods: int = 0

    def rows(self) -> list[dict]:
        """The steps as table rows: step key, number, label, pods, amount (text), what it counts, what a window change does."""
        gpus = f"{self.reclaimable_gpus:g} GPUs, " if self.reclaimable_pods else ""
        return [
            _row("idle", "Idle in the window", self.idle_pods, money(self.idle_usd),
                 "every allocated pod's idle GPU time at its price: the chargeback's idle"),
            _row("hoarders", "of which hoarders", self.hoarder_pods, money(self.hoarder_usd),
                 "pods idle most of their observed time, or idle right up to the end"),
            _row("holding", "still holding their GPUs", self.holding_pods, money(self.holding_usd),
                 "hoarders whose GPUs were still sampled at the window's end; the others ended"),
            _row("reclaimable", "reclaimable now", self.reclaimable_pods,
                 f"{gpus}{money(self.reclaimable_usd_per_hour)}/hour",
                 "idle for the reclaim threshold right up to the end: what they cost per hour held"),
            _row("run_rate", "run-rate if given back", self.reclaimable_pods,
                 f"{money(self.run_rate_usd_per_month)}/month",
                 f"each reclaimable pod's idle cost per hour it was observed x {self.hours_per_month:g} h"),
        ]

    def lines(self) -> list[str]:
        """Plain text: one line per step (the CLI summary)."""
        rows = [{**r, "label": f"{r['number']}. {r['label']}"} for r in self.rows()]
        width = max(len(r["label"]) for r in rows)
        amount = max(len(r["amount"]) for r in rows)
        unpriced = f" ({self.unpriced_pods} idle pods unpriced: left out of every sum)" if self.unpriced_pods else ""
        return [f"idle GPUs, from the window to a monthly saving{unpriced}:"] + [
            f"  {r['label']:<{width}}  {r['pods']:>5,} pods  {r['amount']:>{amount}}  ({r['meaning']})" for r in rows]


def bridge(idle, *, chargeback=None, hours_per_month: float = units.HOURS_PER_MONTH) -> Bridge:
    """The bridge over one idle_hoarding frame (None or empty: every step 0). ``chargeback``: the same
    window's chargeback rows (already narrowed to the same teams), whose idle cents step 1 then quotes,
    so it equals the Fleet and Chargeback pages' idle to the cent (they round each team row)."""
    # no GPU of the window has a price: every amount is unknown, even an empty step's
    no_price = chargeback is not None and bool(len(chargeback)) and chargeback_rules.fleet_unpriced(chargeback)
    if idle is None or not len(idle):
        usd = None if no_price else 0.0
        return Bridge(0, usd, 0, usd, 0, usd, 0, 0.0, usd, usd, hours_per_month)
    idle_usd = _numbers(idle, "idle_cost_usd")
    priced = _known(idle, "idle_cost_usd")
    def cents(value: float, step) -> float | None:
        """``value`` to the cent; None (unknown) when no GPU is priced or none of the step's pods is."""
        return None if no_price or (len(step) and not step.any()) else round(float(value), 2)

    is_idle = _numbers(idle, "idle_gpu_hours") > 0 if "idle_gpu_hours" in idle else idle_usd > 0
    hoarder = _flag(idle, "hoarder")
    reclaimable = _flag(idle, "reclaimable_now")
    holding = hoarder & (held_at_end(idle) | reclaimable)
    now = idle[reclaimable]
    total = idle_usd.sum() if chargeback is None else chargeback.loc[chargeback["kind"] == "team", "idle_usd"].sum()
    rate = sum(pod_run_rate(r, hours_per_month) for r in now[priced[reclaimable]].to_dict("records"))
    return Bridge(
        idle_pods=int(is_idle.sum()), idle_usd=cents(total, priced[is_idle]),
        hoarder_pods=int(hoarder.sum()), hoarder_usd=cents(idle_usd[hoarder].sum(), priced[hoarder]),
        holding_pods=int(holding.sum()), holding_usd=cents(idle_usd[holding].sum(), priced[holding]),
        reclaimable_pods=int(reclaimable.sum()), reclaimable_gpus=float(_numbers(now, "gpu_count").sum()),
        reclaimable_usd_per_hour=cents(_numbers(now, "usd_per_hour").sum(), priced[reclaimable]),
        run_rate_usd_per_month=cents(rate, priced[reclaimable]),
        hours_per_month=hours_per_month, unpriced_pods=int((is_idle & ~priced).sum()))


def held_at_end(idle):
    """Per pod: its GPUs were still sampled at the window's end (a findings CSV of an older gpuwatch,
    without the column: its pod has no end time)."""
    if "held_at_end" in idle:
        return _flag(idle, "held_at_end")
    return idle["end_ts"].isna() if "end_ts" in idle else _flag(idle, "held_at_end")


def pod_run_rate(row: dict, hours_per_month: float = units.HOURS_PER_MONTH) -> float:
    """A pod's idle cost per hour it was observed in the window, x ``hours_per_month`` (0 when never observed)."""
    hours = _number(row.get("observed_seconds")) / units.SECONDS_PER_HOUR
    return _number(row.get("idle_cost_usd")) / hours * hours_per_month if hours > 0 else 0.0


def pod_basis(row: dict, hours_per_month: float = units.HOURS_PER_MONTH) -> str:
    """The assumption behind ``pod_run_rate``, in words."""
    hours = _number(row.get("observed_seconds")) / units.SECONDS_PER_HOUR
    return (f"idle cost ${_number(row.get('idle_cost_usd')):,.2f} over the {hours:,.1f} h the pod was observed, "
            f"at that rate for {hours_per_month:g} h/month while it keeps its GPUs")


def money(value: float | None) -> str:
    """USD to the cent; "unpriced" for an unknown amount (never $0.00)."""
    return "unpriced" if value is None else f"${value:,.2f}"


def _row(step: str, label: str, pods: int, amount: str, meaning: str) -> dict:
    return {"step": step, "number": STEPS.index(step) + 1, "label": label, "pods": pods, "amount": amount, "meaning": meaning,
            "window": WINDOW_EFFECT[step]}


def _numbers(frame, column: str):
    """A numeric column, unknown as 0 for a sum (a findings CSV may lack it: then every row 0)."""
    import pandas as pd

    if column not in frame:
        return pd.Series(0.0, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce").fillna(0.0).astype(float)


def _flag(frame, column: str):
    import pandas as pd

    if column not in frame:
        return pd.Series(False, index=frame.index)
    return frame[column].astype("boolean").fillna(False).astype(bool)


def _number(value) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if number != number else number


def _known(frame, column: str):
    """Per row: ``column`` holds a known number (a pod on an unpriced GPU has no idle cost)."""
    import pandas as pd

    if column not in frame:
        return pd.Series(False, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce").notna()

