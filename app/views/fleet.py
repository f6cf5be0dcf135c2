"""Fleet: what the GPUs cost, where the waste is (which teams, which actions), and how it moved.

Every dollar is the chargeback's (the tiles, the teams) or adds up to it (the charts: their
``not sampled`` part is the fleet cost the samples do not cover), so this page, Chargeback and the
weekly report agree to the cent.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st
import ui

ctx = ui.current()
st.title("Fleet")
ui.window_caption(ctx)
bucket = 600 if (ctx.end - ctx.start).days <= 2 else 3600
frame = ui.analysis(ctx, "fleet_timeseries", bucket_seconds=bucket)
series = frame[frame["scope"] == "bucket"]
if series.empty:
    st.info("No GPU samples in this window. Widen the time range in the sidebar.")
    st.stop()

priced = ui.judged(ctx, "chargeback")  # no GPU priced: every dollar here is unknown, never $0.00
if not priced:
    ui.not_judged(ctx, "chargeback")
totals = frame[frame["scope"] == "window"].iloc[0]  # the whole window, from the same scan
charge = ui.chargeback(ctx)  # money from chargeback, so every page agrees to the cent
previous = ui.previous_chargeback(ctx)  # the same length just before, when the data covers it
picked = ui.for_teams(ctx, charge[charge["kind"] == "team"])
before = None if previous is None else ui.for_teams(ctx, previous[previous["kind"] == "team"])


def tile(col, label: str, now: float, then: float | None, *, help: str | None = None) -> None:
    """A dollar tile with its change against the previous period (more waste is red)."""
    if not priced:
        col.metric(label, ui.money(None), help="No GPU is priced: the cost is unknown (see the note above).")
        return
    delta = None if then is None else f"{now - then:+,.2f} vs previous period"
    col.metric(label, ui.money(now), delta=delta, delta_color="inverse", help=help)


def part(rows: pd.DataFrame | None, kind: str | None = None, column: str = "cost_usd") -> float | None:
    if rows is None:
        return None
    return float(rows[column].sum() if kind is None else rows.loc[rows["kind"] == kind, column].sum())


cols = st.columns(4)
cols[0].metric("GPUs", f"{int(totals['fleet_gpus']):,}",
               help=f"GPUs in the devices data. Sampled on average: {totals['gpus']:,.1f} (the rest is scrape gaps "
                    "or MIG capacity no instance holds: 'not sampled' in the charts).")
if ctx.teams:
    tile(cols[1], "Selected teams' cost", part(picked), part(before))
else:
    tile(cols[1], "Fleet cost", float(charge["fleet_cost_usd"].iloc[0]) if len(charge) else 0.0,
         None if previous is None or not len(previous) else float(previous["fleet_cost_usd"].iloc[0]))
cols[2].metric("Reported util", f"{totals['reported_util']:.1%}", help="GPU_UTIL (GR_ENGINE_ACTIVE on MIG), fleet-wide")
cols[3].metric("Effective util (SM)", f"{totals['effective_util']:.1%}" if pd.notna(totals["effective_util"]) else "unknown",
               help="SM_ACTIVE where profiling fields exist, fleet-wide; unknown elsewhere, never guessed.")
cols = st.columns(4)
tile(cols[0], "Idle (all pods)", part(picked, column="idle_usd"), part(before, column="idle_usd"),
     help="Every allocated pod's idle time (chargeback). The Idle page also shows the hoarders' part.")
if ui.judged(ctx, "false_utilization"):
    tile(cols[1], "False utilization", part(picked, column="false_util_usd"), part(before, column="false_util_usd"))
else:  # no SM activity in the window: unknown, never $0.00
    cols[1].metric("False utilization", "not judged", help="No SM activity (DCGM_FI_PROF_SM_ACTIVE) in this window: "
                   "false utilization cannot be judged. The Readiness page names the counters line that enables it.")
if not ctx.teams:
    tile(cols[2], "Unallocated", part(charge, "unallocated"), part(previous, "unallocated"))
    tile(cols[3], "Stranded MIG", part(charge, "stranded"), part(previous, "stranded"))
if previous is None:
    st.caption("No change shown: the data does not cover the period of the same length before this window.")
with st.expander("Idle GPUs: from the idle cost above to what giving GPUs back saves a month", expanded=True):
    ui.bridge(ctx)

left, right = st.container(), st.container()  # one above the other: the actions are sentences
with left:
    st.subheader("Top wasting teams")
    if not priced:  # no GPU priced: the teams' waste in dollars is unknown
        st.info("Not judged: no GPU is priced in this window.")
    else:
        if not ui.judged(ctx, "false_utilization"):  # unknown false-util: idle only, the column left out
            picked = picked.assign(false_util_usd=0.0)
        waste = (picked.assign(waste_usd=picked["idle_usd"] + picked["false_util_usd"])
                 .groupby("team", as_index=False)[["waste_usd", "idle_usd", "false_util_usd"]].sum()
                 .astype({"waste_usd": float, "idle_usd": float, "false_util_usd": float})  # no priced team: empty, typed
                 .nlargest(5, "waste_usd"))
        if not ui.judged(ctx, "false_utilization"):
            waste = waste.drop(columns="false_util_usd")
        ui.table(waste, "top_wasting_teams", empty="No team wasted GPU time in this window.",
                 columns={"team": "Team", "waste_usd": "Idle + false-util" if "false_util_usd" in waste else "Idle "
                          "(false-util not judged)", "idle_usd": "Idle", "false_util_usd": "False-util"})
with right:
    st.subheader("Top actions")
    recs = ui.for_teams(ctx, ui.recommendation_frame(ctx))
    top = recs[recs["counted"]].head(5)
    ui.table(top[["monthly_savings_usd", "team", "action"]], "top_actions",
             empty="Nothing to recommend for this window.",
             columns={"monthly_savings_usd": "Saves / month", "team": "Team", "action": "Action"})
    st.caption(f"All {len(recs):,} on the Recommendations page, with the evidence and the basis of each saving.")

if ctx.teams:
    st.caption("The charts below are fleet-wide (samples carry no team when no pod holds the GPU).")
STATES = {"allocated_busy_gpus": "allocated, busy", "allocated_idle_gpus": "allocated, idle",
          "unallocated_gpus": "unallocated", "not_sampled_gpus": "not sampled"}
COLORS = ["#2e7d32", "#f9a825", "#9e9e9e", "#cfd8dc"]
LABEL = "{" + ", ".join(f"'{k}': '{v}'" for k, v in STATES.items()) + "}[datum.column]"
st.subheader("GPUs: allocated vs idle vs unallocated")
state_chart = (
    alt.Chart(series).transform_fold(list(STATES), as_=["column", "gpus"])
    .transform_calculate(state=LABEL)
    .mark_area()
    .encode(x=alt.X("bucket_start:T", title="time (UTC)"),
            y=alt.Y("gpus:Q", stack=True, title="GPUs", axis=alt.Axis(tickMinStep=1)),
            color=alt.Color("state:N", sort=list(STATES.values()), title=None,
                            scale=alt.Scale(domain=list(STATES.values()), range=COLORS), legend=alt.Legend(orient="top")),
            tooltip=["bucket_start:T", "state:N", alt.Tooltip("gpus:Q", format=".1f")])
)
st.altair_chart(state_chart, width="stretch", height=280)

st.subheader("Reported vs effective utilization (the false-utilization gap)")
st.caption("Reported = GPU_UTIL (GR_ENGINE_ACTIVE on MIG): *a kernel was running*. Effective = SM_ACTIVE: "
           "*the SMs did work*. The shaded band between them is time that looks busy but is not.")
base = alt.Chart(series).encode(x=alt.X("bucket_start:T", title="time (UTC)"))
gap = base.mark_area(opacity=0.35, color="#e53935").encode(
    y=alt.Y("effective_util:Q", title="utilization", axis=alt.Axis(format="%")), y2="reported_util:Q")
signal, names = ui.legend_names(["reported_util", "effective_util"])
lines = base.transform_fold(["reported_util", "effective_util"], as_=["column", "value"]).transform_calculate(
    signal=signal).mark_line().encode(
    y="value:Q", color=alt.Color("signal:N", sort=names, title=None,
                                 scale=alt.Scale(range=["#1565c0", "#6a1b9a"]), legend=alt.Legend(orient="top")),
    tooltip=["bucket_start:T", "signal:N", alt.Tooltip("value:Q", format=".1%")])
st.altair_chart(gap + lines, width="stretch", height=280)

COST = {"busy_cost_usd": "allocated, busy", "idle_cost_usd": "allocated, idle",
        "unallocated_cost_usd": "unallocated", "not_sampled_cost_usd": "not sampled"}
st.subheader("Cost per day")
if not priced:
    st.info("Not judged: no GPU is priced in this window (the note at the top names what enables it).")
    st.stop()
st.caption(f"The bars add up to the fleet cost ({ui.money(series['fleet_cost_usd'].sum())}): samples split it into "
           "busy, idle and unallocated; *not sampled* is the rest (scrape gaps, MIG capacity no instance holds).")
cost = (
    alt.Chart(series).transform_fold(list(COST), as_=["column", "usd"])
    .transform_calculate(part="{" + ", ".join(f"'{k}': '{v}'" for k, v in COST.items()) + "}[datum.column]")
    .mark_bar()
    .encode(x=alt.X("yearmonthdate(bucket_start):O", title="day (UTC)", axis=alt.Axis(labelAngle=0, format="%b %d")),
            y=alt.Y("sum(usd):Q", title="USD", stack=True, axis=ui.usd_axis()),
            color=alt.Color("part:N", sort=list(COST.values()), title=None,
                            scale=alt.Scale(domain=list(COST.values()), range=COLORS), legend=alt.Legend(orient="top")),
            tooltip=["yearmonthdate(bucket_start):O", "part:N", alt.Tooltip("sum(usd):Q", format="$,.2f")])
)
st.altair_chart(cost, width="stretch", height=280)
with st.expander("Fleet time series (table)"):
    ui.table(series, "fleet_timeseries", empty="No samples in this window.")
