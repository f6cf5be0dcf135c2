"""Fleet: GPUs allocated vs idle vs unallocated over time, reported vs effective utilization, cost per day."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("Fleet")
ui.window_caption(ctx)
st.caption("Fleet-wide: the team filter does not apply to this page.")
bucket = 600 if (ctx.end - ctx.start).days <= 2 else 3600
frame = ui.analysis(ctx, "fleet_timeseries", bucket_seconds=bucket)
series = frame[frame["scope"] == "bucket"]
if series.empty:
    st.info("No GPU samples in this window. Widen the time range in the sidebar.")
    st.stop()

totals = frame[frame["scope"] == "window"].iloc[0]  # the whole window, from the same scan
charge = ui.chargeback(ctx)  # money from chargeback, so every page agrees to the cent
teams = charge[charge["kind"] == "team"]
cols = st.columns(4)
cols[0].metric("GPUs (mean)", f"{totals['gpus']:.1f}")
cols[1].metric("Fleet cost", ui.money(charge["fleet_cost_usd"].iloc[0] if len(charge) else 0.0))
cols[2].metric("Reported util", f"{totals['reported_util']:.1%}", help="GPU_UTIL (GR_ENGINE_ACTIVE on MIG)")
cols[3].metric("Effective util (SM)", f"{totals['effective_util']:.1%}",
               help="SM_ACTIVE where profiling fields exist; unknown elsewhere, never guessed.")
cols = st.columns(4)
cols[0].metric("Idle (allocated)", ui.money(teams["idle_usd"].sum()))
cols[1].metric("False utilization", ui.money(teams["false_util_usd"].sum()))
cols[2].metric("Unallocated", ui.money(charge.loc[charge["kind"] == "unallocated", "cost_usd"].sum()))
cols[3].metric("Stranded MIG", ui.money(charge.loc[charge["kind"] == "stranded", "cost_usd"].sum()))

STATES = {"allocated_busy_gpus": "allocated, busy", "allocated_idle_gpus": "allocated, idle",
          "unallocated_gpus": "unallocated"}
st.subheader("GPUs: allocated vs idle vs unallocated")
state_chart = (
    alt.Chart(series).transform_fold(list(STATES), as_=["column", "gpus"])
    .transform_calculate(state="{'allocated_busy_gpus': 'allocated, busy', 'allocated_idle_gpus': "
                               "'allocated, idle', 'unallocated_gpus': 'unallocated'}[datum.column]")
    .mark_area()
    .encode(x=alt.X("bucket_start:T", title="time (UTC)"), y=alt.Y("gpus:Q", stack=True, title="GPUs"),
            color=alt.Color("state:N", sort=list(STATES.values()),
                            scale=alt.Scale(range=["#2e7d32", "#f9a825", "#9e9e9e"])),
            tooltip=["bucket_start:T", "state:N", alt.Tooltip("gpus:Q", format=".1f")])
    .properties(height=260)
)
st.altair_chart(state_chart, width="stretch")

st.subheader("Reported vs effective utilization (the false-utilization gap)")
st.caption("Reported = GPU_UTIL (GR_ENGINE_ACTIVE on MIG): *a kernel was running*. Effective = SM_ACTIVE: "
           "*the SMs did work*. The shaded band between them is time that looks busy but is not.")
base = alt.Chart(series).encode(x=alt.X("bucket_start:T", title="time (UTC)"))
gap = base.mark_area(opacity=0.35, color="#e53935").encode(
    y=alt.Y("effective_util:Q", title="utilization", axis=alt.Axis(format="%")), y2="reported_util:Q")
lines = base.transform_fold(["reported_util", "effective_util"], as_=["signal", "value"]).mark_line().encode(
    y="value:Q", color=alt.Color("signal:N", sort=["reported_util", "effective_util"],
                                 scale=alt.Scale(range=["#1565c0", "#6a1b9a"])),
    tooltip=["bucket_start:T", "signal:N", alt.Tooltip("value:Q", format=".1%")])
st.altair_chart((gap + lines).properties(height=260), width="stretch")

st.subheader("Cost per day (observed samples)")
cost = (
    alt.Chart(series).transform_fold(["busy_cost_usd", "idle_cost_usd", "unallocated_cost_usd"],
                                     as_=["column", "usd"])
    .transform_calculate(part="replace(replace(datum.column, '_cost_usd', ''), 'busy', 'allocated, busy')")
    .mark_bar()
    .encode(x=alt.X("yearmonthdate(bucket_start):O", title="day (UTC)"),
            y=alt.Y("sum(usd):Q", title="USD", stack=True),
            color=alt.Color("part:N", sort=["allocated, busy", "idle", "unallocated"],
                            scale=alt.Scale(range=["#2e7d32", "#f9a825", "#9e9e9e"])),
            tooltip=["yearmonthdate(bucket_start):O", "part:N", alt.Tooltip("sum(usd):Q", format="$,.2f")])
    .properties(height=260)
)
st.altair_chart(cost, width="stretch")
ui.table(series, "fleet_timeseries", empty="No samples in this window.")
