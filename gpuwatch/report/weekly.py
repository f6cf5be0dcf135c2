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
from gpuwatch.analyses import params as analysis_params
from gpuwatch.findings import csvfile, findings
from gpuwatch.report import isoweek as weeks
from gpuwatch.report import render, view
from gpuwatch.report.isoweek import Week


@dataclass
class WeekData:
    """Every frame one week's report needs (this week, plus last week's chargeback for the trend)."""

    week: Week
    complete: bool
    previous_covered: bool  # the data reaches back over the whole previous week (else: no trend)
    db_name: str
    thresholds: dict[str, float]
    frames: dict[str, Any] = field(default_factory=dict)


def gather(con: Any, week: Week, *, db_name: str, complete: bool = True,
           thresholds: dict[str, float] | None = None, coverage: Any = None) -> WeekData:
    """Run every analysis the report shows over ``week`` (and the chargeback of the week before).

    ``coverage`` is the data_coverage frame when the caller has it already.
    """
    limits = dict(analysis_params.DEFAULTS if thresholds is None else thresholds)
    this = analysis_params.params(week.start, week.end, **limits)
    last = analysis_params.params(week.previous().start, week.previous().end, **limits)
    frames = findings(con, this, only=("idle_hoarding", "false_utilization", "chargeback", "recommendations"))
    frames["reclaim_audit"] = analyses.run(con, "reclaim_audit", **this)
    frames["previous_chargeback"] = findings(con, last, only=("chargeback",))["chargeback"]
    coverage = analyses.run(con, "data_coverage") if coverage is None else coverage
    first = coverage.at[0, "first_ts"] if len(coverage) else None
    previous_covered = first is not None and not _missing(first) and first.to_pydatetime() <= last["start"]
    daily = analyses.run(con, "fleet_timeseries", bucket_seconds=86400, **this)
    frames["daily"] = daily[daily["scope"] == "bucket"]
    frames["prices"] = store.price_coverage(con)
    return WeekData(week=week, complete=complete, previous_covered=previous_covered, db_name=db_name,
                    thresholds=limits, frames=frames)


def _missing(value: Any) -> bool:
    return value is None or value != value  # None, NaN, NaT


def slug(team: str) -> str:
    """A file-name-safe, collision-free name for a team (any text may be a team)."""
    readable = re.sub(r"[^a-z0-9]+", "-", team.lower()).strip("-")[:40] or "team"
    return f"{readable}-{hashlib.sha256(team.encode()).hexdigest()[:8]}"


def write(data: WeekData, out: Path, *, version: str) -> list[Path]:
    """Write ``fleet.html``, ``team-<slug>.html`` per team and ``chargeback.csv`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    fleet = view.fleet_view(data)
    (out / "fleet.html").write_text(render.page(fleet, version=version), encoding="utf-8")
    written.append(out / "fleet.html")
    for team in view.teams(data):
        path = out / f"team-{slug(team)}.html"
        path.write_text(render.page(view.team_view(data, team), version=version), encoding="utf-8")
        written.append(path)
    csv = out / "chargeback.csv"
    charge = data.frames["chargeback"]
    money = {c: 2 for c in charge.columns if c.endswith("_usd")}  # cents, as the analysis rounded them
    csvfile.to_csv(charge.round({**dict.fromkeys(charge.select_dtypes("float").columns, 6), **money}), csv)
    written.append(csv)
    return written


def default_week(coverage: Any) -> tuple[Week, bool]:
    """The last complete ISO week in the data, else the latest (partial) one, and whether complete."""

    first = coverage.at[0, "first_ts"].to_pydatetime()
    last = coverage.at[0, "last_ts"].to_pydatetime()
    step = float(coverage.at[0, "step_seconds"] or 0)
    complete = weeks.last_complete(first, last, step_seconds=step)
    return (complete, True) if complete else (weeks.of(last), False)


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(tzinfo=None)
