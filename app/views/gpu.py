"""GPU drill-down: one node's GPU over the window: utilization, memory, power, and who held it."""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st
import ui

ctx = ui.current()
st.title("GPU drill-down")
ui.window_caption(ctx)
gpus = ui.analysis(ctx, "gpus")
if gpus.empty:
    st.info("No GPUs in this database.")
    st.stop()
left, right = st.columns(2)
node = left.selectbox("Node", sorted(gpus["node"].unique()), key="gpu_node")
on_node = gpus[gpus["node"] == node]
names = ui.gpu_names(on_node)
uuid = right.selectbox("GPU", list(on_node["gpu_uuid"]), format_func=lambda u: f"{names[u]} ({u[:12]}…)", key="gpu_uuid")
gpu = on_node[on_node["gpu_uuid"] == uuid].iloc[0]
hours = (ctx.end - ctx.start).total_seconds() / 3600
bucket = 600 if hours <= 48 else 3600
series = ui.analysis(ctx, "gpu_timeseries", node=node, gpu_uuid=uuid, bucket_seconds=bucket)

st.caption(f"**{gpu['gpu_model']}** · UUID `{uuid}`")  # a model name is too long for a tile
cols = st.columns(4)
cols[0].metric("Price per hour", "unpriced" if pd.isna(gpu["usd_per_gpu_hour"]) else ui.money(gpu["usd_per_gpu_hour"]))
cols[1].metric("MIG", f"{int(gpu['instances'])} instance(s)" if gpu["mig"] else "no")
cols[2].metric("Pods that held it", f"{len(ui.holders(series)):,}")
cols = st.columns(4)
known = series.dropna(subset=["reported_util"])
cols[0].metric("Reported util (mean)", f"{known['reported_util'].mean():.1%}" if len(known) else "unknown")
effective = series["effective_util"].dropna()
cols[1].metric("Effective util (SM)", f"{effective.mean():.1%}" if len(effective) else "unknown",
               help="SM_ACTIVE where the GPU has profiling fields; unknown elsewhere, never guessed.")
memory = series["fb_used_bytes"].dropna()
cols[2].metric("Peak memory used", f"{memory.max() / ui.GIB:,.1f} GiB" if len(memory) else "unknown")
power = series["power_watts"].dropna()
cols[3].metric("Power (mean)", f"{power.mean():,.0f} W" if len(power) else "unknown")
health = ui.finding(ctx, "unhealthy_gpu")
events = health[health["gpu_uuid"] == uuid]
st.subheader("Health events")
if len(events):
    ui.table(events[["kind", "code", "severity", "events", "first_ts", "last_ts", "pods", "recommendation"]],
             "gpu_health", empty="", columns={"kind": "Event", "code": "XID", "severity": "Severity", "events": "Count",
                                              "first_ts": "First", "last_ts": "Last", "pods": "Pods on it",
                                              "recommendation": "What to do"})
elif len(health):
    st.caption(f"No XID, ECC double-bit, row-remap or lost-GPU event recorded for this GPU in the window "
               f"(the Health & fit page lists {int(health['events'].sum()):,} on {health['gpu_uuid'].nunique():,} other GPU(s)).")
else:
    st.caption("No XID, ECC double-bit, row-remap or lost-GPU event recorded on any GPU in the window: none "
               "happened, or the store holds no health data (the exporter's DCGM_FI_DEV_XID_ERRORS and ECC series).")
st.caption("Temperature is not in gpuwatch's data yet: unknown here, never shown as 0.")
if series.empty:
    st.info("No samples from this GPU in the window.")
    st.stop()

x = alt.X("bucket_start:T", title="time (UTC)")
util = alt.Chart(series.rename(columns={"reported_util": "reported", "effective_util": "effective (SM)"})).transform_fold(
    ["reported", "effective (SM)"], as_=["signal", "value"]).mark_line().encode(
    x=x, y=alt.Y("value:Q", title="utilization", axis=alt.Axis(format="%"), scale=alt.Scale(domain=[0, 1])),
    color=alt.Color("signal:N", title=None, legend=alt.Legend(orient="top")),
    tooltip=["bucket_start:T", "signal:N", alt.Tooltip("value:Q", format=".1%")])
st.altair_chart(util.properties(title="Utilization"), width="stretch", height=240)
left, right = st.columns(2)
mem = alt.Chart(series.assign(gib=series["fb_used_bytes"] / ui.GIB)).mark_area(opacity=0.6, color="#1565c0").encode(
    x=x, y=alt.Y("gib:Q", title="GiB used"), tooltip=["bucket_start:T", alt.Tooltip("gib:Q", format=",.1f")])
left.altair_chart(mem.properties(title="Memory used (peak per bucket)"), width="stretch", height=220)
watts = alt.Chart(series).mark_line(color="#e65100").encode(
    x=x, y=alt.Y("power_watts:Q", title="watts"), tooltip=["bucket_start:T", alt.Tooltip("power_watts:Q", format=",.0f")])
right.altair_chart(watts.properties(title="Power (mean per bucket)"), width="stretch", height=220)
st.subheader("Who held it")
ui.table(ui.holders(series), "gpu_holders", empty="No pod held this GPU in the window.",
         columns={"holder": "Pod (namespace/pod)", "first": "First seen", "last": "Last seen", "buckets": "Buckets"})
