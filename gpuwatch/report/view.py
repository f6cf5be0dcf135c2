"""What a report page shows, built from the week's frames (pure: no I/O besides chart rendering).

Money is the chargeback analysis' own cents: totals are sums of its rows (rounded to the cent),
never recomputed from samples, so the report equals ``chargeback.csv`` exactly.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gpuwatch import idle_bridge, recommendations
from gpuwatch import mig as mig_geometry
from gpuwatch.analyses import chargeback
from gpuwatch.findings import judgement
from gpuwatch.report import charts, health, topology

PARTS = {"productive_usd": "productive", "false_util_usd": "false-util", "idle_usd": "idle",
         "unobserved_usd": "unobserved"}
MEANING = {
    "productive": "allocated and busy (SMs active where measured)",
    "false-util": "allocated, GPU_UTIL high but SMs nearly idle (spin-waits, stalls)",
    "idle": "allocated but idle: the GPU did nothing for the pod holding it",
    "unobserved": "allocated time with no samples (exporter down or pod outside the data)",
    "unallocated": "GPUs (and MIG capacity) no pod held",
    "stranded": "free MIG slices no requested profile can be placed on",
}
TOP = 10


def cents(values: Any) -> float:
    """Sum of chargeback amounts, to the cent (they are cents already; this drops float dust)."""
    return round(float(pd.Series(values, dtype=float).sum()), 2)


def teams(data) -> list[str]:
    """Every team with chargeback rows this week, sorted."""
    charge = data.frames["chargeback"]
    return sorted(charge.loc[charge["kind"] == "team", "team"].dropna().astype(str).unique())


def _previous(data):
    """Last week's chargeback, or an empty frame when the data does not cover last week."""
    prev = data.frames["previous_chargeback"]
    return prev if data.previous_covered else prev.iloc[0:0]


def fleet_view(data, *, links: dict[str, str] | None = None) -> dict:
    """The fleet page: spend by team (each linked to its page), fleet-level waste (unallocated,
    stranded), every finding."""
    everything, prev = data.frames["chargeback"], _previous(data)
    # unpriced use and capped excess carry GPU-hours but no dollars: warned about, not totalled
    charge, prev = (f[~f["kind"].isin(chargeback.PROBLEMS)] for f in (everything, prev))
    rows = _spend_rows(charge[charge["kind"] == "team"], prev[prev["kind"] == "team"], by="team")
    for row in rows:
        row["link"] = (links or {}).get(row["name"])
    for kind in ("unallocated", "stranded"):
        rows.append(_row(charge[charge["kind"] == kind]["team"].iloc[0] if (charge["kind"] == kind).any() else kind,
                         charge[charge["kind"] == kind], prev[prev["kind"] == kind]))
    parts = _parts(charge[charge["kind"] == "team"], extra={
        "unallocated": cents(charge.loc[charge["kind"] == "unallocated", "cost_usd"]),
        "stranded": cents(charge.loc[charge["kind"] == "stranded", "cost_usd"])})
    context = _common(data, title="Fleet", fleet=True, charge=charge, prev=prev, rows=rows, parts=parts,
                      breakdown="Team")
    context["daily_svg"] = charts.daily_cost(data.frames["daily"]) if len(data.frames["daily"]) else ""
    context["waste_svg"] = _waste_svg(charge, by="team", title="Cost by team and kind (fleet parts below)")
    context["problems"] = chargeback.warnings(everything)
    context["groups"] = _group_rows(data, charge, prev)
    context["clusters"] = _cluster_rows(charge)
    context.update(_findings(data, team=None))
    return context


def _cluster_rows(charge) -> list[dict] | None:
    """Spend per cluster in a store holding several (ingest --cluster); None for one cluster."""
    teams = charge[charge["kind"] == "team"]
    if "cluster" not in teams or teams["cluster"].isna().all():
        return None
    return _spend_rows(teams.assign(cluster=teams["cluster"].fillna("(none)")), teams.iloc[0:0], by="cluster")


def _group_rows(data, charge, prev) -> dict | None:
    """Spend by the pod label the report was asked to group by (None without one)."""
    if not data.group_by:
        return None
    teams = charge[charge["kind"] == "team"].assign(group_value=lambda f: f["group_value"].fillna(f"(no {data.group_by})"))
    rows = _spend_rows(teams, prev.iloc[0:0].assign(group_value=None), by="group_value")
    return {"label": data.group_by, "rows": rows}


def team_view(data, team: str) -> dict:
    """One team's page: its namespaces, its waste, its hoarders, offenders and recommendations."""
    charge, prev = (f[(f["kind"] == "team") & (f["team"] == team)]
                    for f in (data.frames["chargeback"], _previous(data)))
    rows = _spend_rows(charge, prev, by="namespace")
    parts = _parts(charge, extra={})
    context = _common(data, title=f"Team {team}", fleet=False, charge=charge, prev=prev, rows=rows, parts=parts,
                      breakdown="Namespace")
    context["daily_svg"] = ""
    context["groups"] = context["clusters"] = None
    context["waste_svg"] = _waste_svg(charge, by="namespace", title=f"Cost by namespace and kind — {team}")
    everything = data.frames["chargeback"]
    context["problems"] = chargeback.warnings(everything[everything["team"] == team])
    context.update(_findings(data, team=team))
    return context


def _common(data, *, title: str, fleet: bool, charge, prev, rows, parts, breakdown: str) -> dict:
    total = cents(charge["cost_usd"])
    previous = cents(prev["cost_usd"]) if data.previous_covered else None
    waste = sum(p["usd"] for p in parts if p["name"] in ("idle", "false-util", "unallocated", "stranded"))
    return {
        "prices": _prices(data), "coverage": _coverage(data),
        "scope_title": title, "fleet": fleet, "week": data.week, "previous": data.week.previous(),
        "complete": data.complete, "db_name": data.db_name, "breakdown_label": breakdown,
        "thresholds": sorted(data.thresholds.items()),
        "spend": {"total": total, "previous": previous, "change": _change(total, previous),
                  "waste": round(waste, 2), "gpu_hours": float(charge["gpu_hours"].sum()), "rows": rows},
        "waste": {"parts": parts, "total": total},
    }


def _coverage(data) -> dict:
    """The coverage line every page shows, and whether the week is marked as thinly covered."""
    from gpuwatch.report.weekly import WELL_COVERED

    cov = data.coverage
    unobserved = cov["unobserved_usd"] / cov["spend_usd"] if cov["spend_usd"] else 0.0
    text = (f"Coverage: samples cover {cov['sampled']:.1%} of the fleet's GPU-hours ({cov['gpus']:,.0f} GPUs × the week); "
            f"allocated time without samples ('unobserved', billed from the pods' allocation intervals) is "
            f"{cov['unobserved_usd']:,.2f} USD, {unobserved:.1%} of the teams' spend")
    return {"text": text, "low": cov["sampled"] < WELL_COVERED, "sampled": cov["sampled"]}


def _prices(data) -> list[str]:
    """One line per GPU model: its price and where that price comes from (or that it has none)."""
    frame = data.frames.get("prices")
    if frame is None:
        return []
    return [f"{r.gpu_model}: " + ("unpriced (not in any cost)" if r.price_source == "unpriced"
                                  else f"${r.usd_per_gpu_hour:,.2f}/GPU-hour, {r.price_source}")
            for r in frame.itertuples(index=False)]


def _spend_rows(charge: pd.DataFrame, prev: pd.DataFrame, *, by: str) -> list[dict]:
    names = sorted(set(charge[by].astype(str)), key=lambda n: -cents(charge.loc[charge[by].astype(str) == n, "cost_usd"]))
    return [_row(name, charge[charge[by].astype(str) == name], prev[prev[by].astype(str) == name]) for name in names]


def _row(name: str, now: pd.DataFrame, before: pd.DataFrame) -> dict:
    total, previous = cents(now["cost_usd"]), (cents(before["cost_usd"]) if len(before) else None)
    return {"name": name, "gpu_hours": float(now["gpu_hours"].sum()), "total": total, "previous": previous,
            "change": _change(total, previous), "link": None}


def _change(now: float, before: float | None) -> float | None:
    return None if not before else (now - before) / before


def _parts(team_rows: pd.DataFrame, *, extra: dict[str, float]) -> list[dict]:
    amounts = {label: cents(team_rows[col]) for col, label in PARTS.items()} | extra
    total = sum(amounts.values())
    return [{"name": name, "usd": usd, "share": usd / total if total else None, "meaning": MEANING[name]}
            for name, usd in amounts.items()]


def _waste_svg(charge: pd.DataFrame, *, by: str, title: str) -> str:
    rows = charge[charge["kind"] == "team"]
    if rows.empty:
        return ""
    long = rows.melt(id_vars=[by], value_vars=list(PARTS), var_name="column", value_name="usd")
    long["part"] = long["column"].map(PARTS)
    fleet_parts = charge[charge["kind"].isin(["unallocated", "stranded"])]
    extra = pd.DataFrame({by: fleet_parts["team"], "part": fleet_parts["kind"], "usd": fleet_parts["cost_usd"]})
    return charts.waste_bars(pd.concat([long[[by, "part", "usd"]], extra], ignore_index=True), by=by, title=title)


def _findings(data, *, team: str | None) -> dict:
    pick = (lambda f: f) if team is None else (lambda f: f[f["team"] == team] if "team" in f.columns else f.iloc[0:0])
    idle = pick(data.frames["idle_hoarding"])
    hoarders = idle[idle["hoarder"].fillna(False).astype(bool)].nlargest(TOP, "idle_cost_usd")
    false = pick(data.frames["false_utilization"])
    offenders = false[false["offender"].fillna(False).astype(bool)].nlargest(TOP, "false_util_cost_usd")
    recs = pick(data.frames["recommendations"]).sort_values(["monthly_savings_usd", "monthly_waste_usd"],
                                                            ascending=False, kind="stable")
    reclaim = pick(data.frames["reclaim_audit"])
    mig = data.frames["mig_fragmentation"] if team is None else data.frames["mig_fragmentation"].iloc[0:0]
    judged = data.frames.get("judgement")
    return {
        "false_util_not_judged": None if judgement.judged(judged, "false_utilization") else (
            judgement.state_of(judged, "false_utilization").to_dict()),
        "blind_spots": [] if judged is None else judged[judged["state"].isin(("not judged", "partly judged"))]
        .to_dict("records"),
        "hoarders": hoarders.to_dict("records"),
        "bridge": idle_bridge.bridge(idle, chargeback=pick(data.frames["chargeback"])).rows(),
        "false_util": offenders.to_dict("records"),
        "false_util_columns": [{"name": c, "title": t, "numeric": n} for c, t, n in (
            ("namespace", "Namespace", False), ("pod", "Pod", False), ("team", "Team", False),
            ("false_util_gpu_hours", "False-util GPU-h", True), ("false_share", "False share", True),
            ("mean_reported", "Reported", True), ("mean_effective", "Effective", True),
            ("false_util_cost_usd", "Cost", True))],
        "mig": mig.to_dict("records"), "mig_total": _mig_total(mig),
        # a fleet-level action (a MIG repack) belongs to no team: a dash, not "nan"
        "recommendations": recs.head(2 * TOP).assign(team=lambda f: f["team"].fillna("—")).to_dict("records"),
        "savings": recommendations.totals(recs)["savings"], "at_stake": recommendations.totals(recs)["at_stake"],
        "reclaim": reclaim.to_dict("records"), "reclaim_summary": _reclaim_summary(reclaim),
        "failures": health.failure_rows(data.frames, team=team,
                                 namespaces=set(data.frames["chargeback"].query("team == @team")["namespace"])
                                 if team is not None else None),
        "topology": topology.section(data.frames, team=team),
    }


def _mig_total(mig: pd.DataFrame) -> dict:
    ok = mig[mig["problem"].fillna("") == ""] if len(mig) else mig
    gpus = len(ok)
    stranded = int(ok["stranded_slices"].sum()) if gpus else 0
    return {"gpus": gpus, "stranded_slices": stranded, "stranded_fraction": stranded / (mig_geometry.MEMORY_SLICES * gpus) if gpus else 0.0,
            "repack_moves": int(ok["repack_moves"].sum()) if gpus else 0}


def _reclaim_summary(reclaim: pd.DataFrame) -> str:
    if reclaim.empty:
        return ""
    counts = reclaim["decision"].value_counts()
    parts = ", ".join(f"{n} {d}" for d, n in counts.items())
    dry = bool(reclaim["dry_run"].fillna(True).all())
    return f"{len(reclaim)} decisions ({parts}){' — all dry-run: nothing was changed' if dry else ''}."
