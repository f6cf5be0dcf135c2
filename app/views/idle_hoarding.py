"""Idle hoarding: pods holding GPUs they do not use, with the evidence (idle since, memory held, $/h)."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("Idle hoarding")
ui.window_caption(ctx)
st.caption("A pod is a hoarder when its GPU was idle (reported < 5 % and SM activity < 5 %) for ≥ 90 % "
           "of ≥ 1 h observed, or it has been idle for ≥ 15 min right up to the end of the window "
           "(*reclaimable now*). Thresholds: the defaults of `gpuwatch analyze` (see its `--help`).")
frame = ui.for_teams(ctx, ui.analysis(ctx, "idle_hoarding"))
st.subheader("From idle time to a monthly saving")
ui.bridge(ctx, frame)
st.subheader("Pods")
hoarders_only = st.toggle("Hoarders only", value=True, key="idle_hoarders_only")
shown = frame[frame["hoarder"].fillna(False).astype(bool)] if hoarders_only else frame
filters = st.columns(3)
for col, (column, label) in zip(filters, (("namespace", "Namespace"), ("node", "Node"),
                                          ("gpu_model", "GPU model")), strict=True):
    if column in shown.columns:
        picked = col.multiselect(label, sorted(shown[column].dropna().astype(str).unique()), key=f"idle_{column}")
        if picked:
            shown = shown[shown[column].astype(str).isin(picked)]

hoarding = shown[shown["hoarder"].fillna(False).astype(bool)]
charge = ui.chargeback(ctx)
cols = st.columns(4)
cols[0].metric("Hoarding pods", f"{len(hoarding):,}")
cols[1].metric("Idle GPU-hours" + (" (hoarders)" if hoarders_only else " (shown pods)"), f"{shown['idle_gpu_hours'].sum():,.1f}")
cols[2].metric("Idle (hoarders)", ui.money(hoarding["idle_cost_usd"].sum()),
               help="The idle cost of the hoarding pods shown (the filters above apply).")
cols[3].metric("Idle (all pods)", ui.money(ui.for_teams(ctx, charge[charge["kind"] == "team"])["idle_usd"].sum()),
               help="Every allocated pod's idle time, as Fleet and Chargeback show it (the team filter applies, "
                    "the filters above do not).")

if not shown.empty:
    top = shown.nlargest(20, "idle_cost_usd")
    chart = alt.Chart(top.assign(who=top["namespace"].astype(str) + "/" + top["pod"].astype(str))).mark_bar(
        color="#f9a825").encode(
        x=alt.X("idle_cost_usd:Q", title="idle cost (USD)", axis=ui.usd_axis()),
        y=alt.Y("who:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)),
        tooltip=["namespace:N", "pod:N", "team:N", alt.Tooltip("idle_gpu_hours:Q", format=".1f"),
                 alt.Tooltip("idle_share:Q", format=".0%"), alt.Tooltip("idle_cost_usd:Q", format="$,.2f")],
    ).properties(title=f"Top {len(top)} by idle cost", height=alt.Step(24))
    st.altair_chart(chart, width="stretch", height="content")
ui.table(shown.sort_values("idle_cost_usd", ascending=False), "idle_hoarding",
         columns={"namespace": "Namespace", "pod": "Pod", "team": "Team", "idle_cost_usd": "Idle cost",
                  "idle_share": "Idle share", "idle_since": "Idle since", "reclaimable_now": "Reclaimable now",
                  "max_fb_used_bytes_idle": "Memory held idle", "usd_per_hour": "$ per hour"},
         empty="No idle hoarding in this window for the selected teams and filters — nothing is sitting "
               "on an idle GPU.")
