"""Chargeback's finisher: stranded MIG cost, the unallocated remainder, and rounding to the cent.

Each pod's parts are rounded to the cent once, in the SQL (staging.sql's usd_cents, as idle_hoarding and
false_utilization round the same pod's figures); a team's parts are sums of those cents, the stranded cost
is rounded by the same rule, and unallocated is the remainder, so the parts add up exactly to the rounded
fleet cost (docs/architecture.md#finding-semantics: "Σ of all parts = fleet cost, to the cent").
"""

from __future__ import annotations

import decimal
import math
from typing import Any

from gpuwatch import analyses, units

PARTS = ("productive_usd", "false_util_usd", "idle_usd", "unobserved_usd")
COLUMNS = ("kind", "team", "namespace", "gpu_hours", "cost_usd", *PARTS, "pods", "share_of_fleet", "fleet_cost_usd",
           "group_value", "cluster")


def finish(con: Any, frame, params: dict):
    """Per-team rows plus `unallocated` and `stranded` rows whose cost_usd sum to the fleet cost."""
    import pandas as pd

    fleet_row = frame[frame["kind"] == "fleet"].iloc[0]
    fleet = float(fleet_row["amount_usd"])
    teams = frame[frame["kind"] == "team"].reset_index(drop=True)
    stranded, stranded_hours = stranded_usd(con, frame[frame["kind"] == "mig_free"], params)
    cents = fleet_cents([float(x) for x in teams[list(PARTS)].to_numpy().ravel()], fleet=fleet, stranded=stranded)
    teams[list(PARTS)] = [[c / 100 for c in cents[i * 4:(i + 1) * 4]] for i in range(len(teams))] or None
    # GPU-hours on every row: the fleet's priced GPU-hours less the teams' and the stranded ones
    # (fsum: exact whatever the order, so the difference does not wobble with DuckDB's parallel sums)
    fleet_hours = float(fleet_row["gpu_hours"] or 0.0)
    unallocated_hours = max(math.fsum([fleet_hours, *(-float(h) for h in teams["gpu_hours"]), -stranded_hours]), 0.0)
    extra = pd.DataFrame([
        {"kind": "unallocated", "team": "(unallocated)", "namespace": "", "cost_usd": cents[-2] / 100, "pods": 0,
         "gpu_hours": unallocated_hours},
        {"kind": "stranded", "team": "(stranded MIG)", "namespace": "", "cost_usd": cents[-1] / 100, "pods": 0,
         "gpu_hours": stranded_hours},
    ])
    teams["cost_usd"] = [sum(cents[i * 4:(i + 1) * 4]) / 100 for i in range(len(teams))]
    out = pd.concat([teams, extra, problems(frame)], ignore_index=True)
    priced = ~out["kind"].isin(PROBLEMS)
    for part in PARTS:
        out[part] = out[part].where(~priced, out[part].fillna(0.0))
    out["gpu_hours"] = out["gpu_hours"].fillna(0.0)
    out["fleet_cost_usd"] = sum(cents) / 100
    out["share_of_fleet"] = out["cost_usd"] / fleet if fleet else math.nan
    out = out.sort_values(["kind", "cost_usd", "team", "namespace"], ascending=[False, False, True, True], kind="stable")
    return out[list(COLUMNS)].reset_index(drop=True)


# Columns that repeat one total on every row: kept in the frame (the pages read the fleet cost from it),
# left out of every chargeback.csv (analyze, the weekly report, the app's downloads), where summing a
# column is the natural act (a sum of fleet_cost_usd was the fleet cost times the rows; the fleet cost is
# the sum of cost_usd).
REPEATED_TOTALS = ("fleet_cost_usd",)


def csv_rows(frame):
    """The chargeback frame as chargeback.csv holds it: every column a row's own figure, none repeating a total."""
    return frame.drop(columns=[c for c in REPEATED_TOTALS if c in frame.columns])


# Rows that carry GPU-hours but no dollars: never $0 inside a team, never part of the fleet cost.
PROBLEMS = ("unpriced", "unpriced_capacity", "over_allocated")


def fleet_unpriced(charge) -> bool:
    """Whether no GPU of the window has a price: GPUs without one, and no priced use or capacity."""
    kinds = set(charge["kind"])
    return "unpriced_capacity" in kinds and "team" not in kinds and not charge["fleet_cost_usd"].fillna(0).any()


def problems(frame):
    """Unpriced use, unpriced GPUs and over-allocation: GPU-hours shown, cost unknown (NaN)."""
    rows = frame[frame["kind"].isin(PROBLEMS)].copy()
    rows.loc[rows["kind"] == "unpriced_capacity", "team"] = "(unpriced GPUs)"
    rows.loc[rows["kind"] == "unpriced_capacity", "namespace"] = ""
    for column in (*PARTS, "cost_usd"):
        rows[column] = float("nan")
    return rows


def warnings(charge) -> list[str]:
    """One plain line per data problem in a chargeback frame (unpriced use, unpriced GPUs, allocations
    capped at capacity), for every place that shows a total: counts and GPU-hours only, no names (names
    are data and these lines go into markdown and HTML)."""
    out = []
    for kind, text in (
        ("unpriced", "{h:,.1f} GPU-hours in {n} team/namespace row(s) ran on GPUs whose model has no price: "
                     "no team is charged for them (add the models to prices.csv)"),
        ("unpriced_capacity", "{pods:,.0f} GPU(s) without a price ({h:,.1f} GPU-hours) are outside the fleet cost"),
        ("over_allocated", "{pods:,.0f} pod(s) were allocated more GPUs than they could hold: {h:,.1f} GPU-hours "
                           "above capacity were capped, not charged (a data problem in the pods data; time-sliced GPUs "
                           "need their replica count: kube_node_labels nvidia.com/gpu.replicas)"),
    ):
        rows = charge[charge["kind"] == kind]
        if len(rows):
            out.append(text.format(h=float(rows["gpu_hours"].sum()), n=len(rows), pods=float(rows["pods"].sum())))
    return out


def stranded_usd(con: Any, mig_free, params: dict) -> tuple[float, float]:
    """Cost and GPU-hours of MIG capacity that is free but cannot hold any instance (mig_fragmentation's
    stranded slices).

    ``params["fragmentation"]``, when given, is mig_fragmentation's result for the same window
    (a caller that already has it saves running the placement search twice).
    """

    if not len(mig_free) or "mig_fragmentation" not in analyses.names():
        return 0.0, 0.0  # no MIG GPUs, or the fragmentation analysis is not installed: nothing to strand
    frag = params.get("fragmentation")
    if frag is None:
        frag = analyses.run(con, "mig_fragmentation", **{k: v for k, v in params.items() if k != "fragmentation"})
    joined = mig_free.merge(frag[["node", "gpu_uuid", "free_slices", "stranded_slices"]], on=["node", "gpu_uuid"])
    free = joined["free_slices"].astype(float)
    share = (joined["stranded_slices"].astype(float) / free.where(free > 0)).fillna(0.0).clip(0.0, 1.0)
    return (float((joined["amount_usd"].astype(float) * share).sum()),
            math.fsum(joined["gpu_hours"].astype(float).fillna(0.0) * share))


def cents(amount: float) -> int:
    """``amount`` in whole cents, rounded as staging.sql's usd_cents rounds a pod's figure (half to even
    on the amount to 9 decimals): the one rounding rule of every dollar gpuwatch shows."""
    return int(decimal.Decimal(repr(round(amount, 9))).quantize(decimal.Decimal("0.01"),
                                                                rounding=decimal.ROUND_HALF_EVEN) * 100)


def fleet_cents(parts: list[float], *, fleet: float, stranded: float) -> list[int]:
    """Cents of the teams' parts (already whole cents: each pod's rounded once in the SQL), then the
    unallocated and the stranded cost, summing exactly to the fleet cost in cents. Unallocated is the
    remainder, so no team figure moves to make the sum work; only where the pods' rounded cents exceed
    the fleet (a fully allocated fleet, at most half a cent per pod) are those cents taken back from the
    largest parts, one each, unallocated 0. DataError for a non-finite or absurd amount."""
    if not all(math.isfinite(v) and abs(v) <= MAX_USD for v in [*parts, fleet, stranded]):
        raise units.DataError(f"chargeback: an amount is not finite or above ${MAX_USD:,.0f} "
                              "(check the prices and allocations)")
    out = [cents(v) for v in parts] + [0, cents(stranded)]
    out[-2] = cents(fleet) - sum(out)
    if 0 < -out[-2] <= len(parts):  # rounding, at most a cent per part: taken from the largest parts
        for i in sorted(range(len(parts)), key=lambda i: (-out[i], i))[:-out[-2]]:
            out[i] -= 1
        out[-2] = 0
    return out  # more than rounding (parts above the fleet: a data problem) stays visible as negative


# Above this many dollars a float no longer holds whole cents (2**53 cents): such an amount is bad data
# (the store refuses absurd prices at load; this keeps analysis bounded whatever reaches it).
MAX_USD = 1e13
