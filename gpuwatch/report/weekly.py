"""The weekly report: gather the analyses for one ISO week, then write HTML (fleet + per team) and CSV.

``gather`` does the I/O (analyses over the store); ``fleet_view``/``team_view`` (view.py) are pure
and turn the frames into what the template shows; ``write`` renders and writes the files. Money
comes straight from the chargeback analysis, so the report's totals equal it to the cent.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuwatch import analyses, store
from gpuwatch.analyses import chargeback
from gpuwatch.analyses import params as analysis_params
from gpuwatch.findings import FAILURES, TOPOLOGY, csvfile, findings
from gpuwatch.report import isoweek as weeks
from gpuwatch.report import render, view
from gpuwatch.report.isoweek import Week

# A week whose samples cover less than this share of the fleet's GPU-hours is not billed (the report
# refuses it, exit 1; `report weekly --min-coverage` changes it); below WELL_COVERED it is marked.
MIN_COVERAGE = 0.5
WELL_COVERED = 0.95


@dataclass
class WeekData:
    """Every frame one week's report needs (this week, plus last week's chargeback for the trend)."""

    week: Week
    complete: bool
    previous_covered: bool  # the data reaches back over the whole previous week (else: no trend)
    db_name: str
    thresholds: dict[str, float]
    frames: dict[str, Any] = field(default_factory=dict)
    group_by: str = ""  # a pod label the spend is also shown by (chargeback's group_value)

    @property
    def coverage(self) -> dict[str, float]:
        """How much of the week the data covers: ``sampled`` = sampled GPU-hours / the fleet's GPU-hours
        (0 without samples), ``gpus`` in the fleet, ``unobserved_usd`` = allocated cost with no samples."""
        window = self.frames["fleet_window"]
        fleet = float(window["fleet_gpus"].iloc[0]) if len(window) else 0.0
        sampled = float(window["gpus"].iloc[0]) / fleet if len(window) and fleet else 0.0
        charge = self.frames["chargeback"]
        teams = charge[charge["kind"] == "team"]
        return {"sampled": sampled, "gpus": fleet, "unobserved_usd": round(float(teams["unobserved_usd"].sum()), 2),
                "spend_usd": round(float(teams["cost_usd"].sum()), 2)}


def gather(con: Any, week: Week, *, db_name: str, complete: bool = True,
           thresholds: dict[str, float] | None = None, coverage: Any = None, group_by: str = "") -> WeekData:
    """Run every analysis the report shows over ``week`` (and the chargeback of the week before).

    ``coverage`` is the data_coverage frame when the caller has it already.
    """
    limits = dict(analysis_params.DEFAULTS if thresholds is None else thresholds)
    this = analysis_params.params(week.start, week.end, **limits, group_by=group_by)
    last = analysis_params.params(week.previous().start, week.previous().end, **limits)
    frames = findings(con, this, only=("idle_hoarding", "false_utilization", "chargeback", *FAILURES, *TOPOLOGY,
                                       "recommendations", "judgement"))
    frames["reclaim_audit"] = analyses.run(con, "reclaim_audit", **this)
    frames["previous_chargeback"] = findings(con, last, only=("chargeback",))["chargeback"]
    coverage = analyses.run(con, "data_coverage") if coverage is None else coverage
    first = coverage.at[0, "first_ts"] if len(coverage) else None
    previous_covered = first is not None and not _missing(first) and first.to_pydatetime() <= last["start"]
    daily = analyses.run(con, "fleet_timeseries", bucket_seconds=86400, **this)
    frames["daily"], frames["fleet_window"] = daily[daily["scope"] == "bucket"], daily[daily["scope"] == "window"]
    frames["prices"] = store.price_coverage(con)
    return WeekData(week=week, complete=complete, previous_covered=previous_covered, db_name=db_name,
                    thresholds=limits, frames=frames, group_by=group_by)


def _missing(value: Any) -> bool:
    return value is None or value != value  # None, NaN, NaT


def slug(team: str) -> str:
    """A file-name-safe, collision-free name for a team (any text may be a team)."""
    readable = re.sub(r"[^a-z0-9]+", "-", team.lower()).strip("-")[:40] or "team"
    return f"{readable}-{hashlib.sha256(team.encode()).hexdigest()[:8]}"


def write(data: WeekData, out: Path, *, version: str) -> list[Path]:
    """Write ``fleet.html``, ``team-<slug>.html`` per team (linked both ways), ``chargeback.csv`` (with
    the period and each row's rate) and ``prices.csv`` (the price applied per GPU model) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    links = {team: f"team-{slug(team)}.html" for team in view.teams(data)}
    fleet = view.fleet_view(data, links=links)
    prices = data.frames["prices"]["price_source"]
    unpriced = bool(len(prices)) and bool((prices == "unpriced").all())  # no GPU has a price: no dollar is known
    (out / "fleet.html").write_text(render.page(fleet, version=version, unpriced=unpriced), encoding="utf-8")
    written.append(out / "fleet.html")
    for team, name in links.items():
        path = out / name
        path.write_text(render.page(view.team_view(data, team), version=version, unpriced=unpriced), encoding="utf-8")
        written.append(path)
    written.append(write_chargeback(data, out / "chargeback.csv"))
    csvfile.to_csv(data.frames["prices"], out / "prices.csv")
    written.append(out / "prices.csv")
    return written


def write_chargeback(data: WeekData, path: Path) -> Path:
    """The chargeback rows as finance reads them: the period first, GPU-hours and cost, and the rate
    (cost / GPU-hours: the blended USD per GPU-hour the row was billed at; empty without GPU-hours)."""
    charge = chargeback.csv_rows(data.frames["chargeback"])  # no column repeating the fleet total
    hours = charge["gpu_hours"].astype(float)
    rows = charge.assign(usd_per_gpu_hour=(charge["cost_usd"] / hours.where(hours > 0)).round(4))
    rows.insert(0, "period_end", data.week.end)
    rows.insert(0, "period_start", data.week.start)
    rows.insert(0, "period", data.week.label)
    money = {c: 2 for c in rows.columns if c.endswith("_usd")}  # cents, as the analysis rounded them
    csvfile.to_csv(rows.round({**dict.fromkeys(rows.select_dtypes("float").columns, 6), **money}), path)
    return path


def default_week(coverage: Any) -> tuple[Week, bool]:
    """The last complete ISO week in the data, else the latest (partial) one, and whether complete."""

    first = coverage.at[0, "first_ts"].to_pydatetime()
    last = coverage.at[0, "last_ts"].to_pydatetime()
    step = float(coverage.at[0, "step_seconds"] or 0)
    complete = weeks.last_complete(first, last, step_seconds=step)
    return (complete, True) if complete else (weeks.of(last), False)


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
