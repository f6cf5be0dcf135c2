"""Recommendations: what to do about the waste, who owns it, what it saves and why; filter and download."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("Recommendations")
ui.window_caption(ctx)
frame = ui.for_teams(ctx, ui.recommendation_frame(ctx))
st.caption(f"Monthly savings = the run-rate of the waste each action removes, as observed in this window "
           f"({ui.observed_hours_text(ctx)}), × 730 h; never more than that waste; giving back idle GPUs: each "
           "pod's own idle rate over the hours it was observed (the idle bridge, Idle hoarding page). *Investigate* items carry "
           "the waste at stake and are not counted as savings: a person must look first.")
KINDS = {"reclaim_idle": "Give back idle GPUs", "rightsize_mig": "Right-size to a MIG instance",
         "repack_mig": "Repack MIG instances", "investigate_false_util": "Investigate false utilization",
         "investigate_hoarder": "Ask hoarders busy at the end to give GPUs back",
         "fix_mig_profile": "Move to a MIG profile that fits", "gang_schedule": "Gang-schedule stalled jobs",
         "reset_gpu": "Reset GPUs holding orphaned memory", "pin_driver": "Pin the pool's driver",
         "cordon_gpu": "Cordon failing GPUs", "investigate_xid": "Investigate application XIDs",
         "investigate_host_memory": "Investigate OOMKilled (host memory)",
         "investigate_straggler": "Investigate stragglers",
         "fix_placement": "Fix multi-GPU placement (topology; estimate)",
         "defragment": "Defragment GPU pools (opportunity cost)"}
frame = frame.assign(what=frame["kind"].map(KINDS).fillna(frame["kind"]))
picked = st.multiselect("Kind", sorted(frame["what"].unique()), key="recs_kind", placeholder="All kinds")
shown = frame[frame["what"].isin(picked)] if picked else frame
total = ui.recommendation_totals(shown)
cols = st.columns(3)
cols[0].metric("Recommendations", f"{len(shown):,}")
cols[1].metric("Monthly savings", ui.money(total["savings"]), help="Counted actions only (reclaim, right-size, repack).")
cols[2].metric("Investigate: at stake / month", ui.money(total["at_stake"]),
               help="False-utilization cost at its observed run-rate: not counted as savings.")
if not shown.empty:
    by_kind = shown.groupby("what", as_index=False).agg(savings=("monthly_savings_usd", "sum"),
                                                        waste=("monthly_waste_usd", "sum"), n=("id", "count"))
    long = by_kind.melt(id_vars=["what", "n"], value_vars=["savings", "waste"], var_name="figure", value_name="usd")
    chart = alt.Chart(long).mark_bar().encode(
        x=alt.X("usd:Q", title="USD per month", axis=ui.usd_axis()),
        y=alt.Y("what:N", sort="-x", title=None, axis=alt.Axis(labelLimit=320)),
        yOffset=alt.YOffset("figure:N", sort=["waste", "savings"]),
        color=alt.Color("figure:N", sort=["waste", "savings"], title=None,
                        scale=alt.Scale(domain=["waste", "savings"], range=["#f9a825", "#2e7d32"]),
                        legend=alt.Legend(orient="top")),
        tooltip=["what:N", "figure:N", alt.Tooltip("n:Q", title="actions"), alt.Tooltip("usd:Q", format="$,.2f")],
    ).properties(height=alt.Step(22))
    st.altair_chart(chart, width="stretch", height="content")
ui.table(shown.drop(columns=["what"]), "recommendations",
         columns={"action": "Action", "team": "Team", "monthly_savings_usd": "Monthly savings",
                  "monthly_waste_usd": "Monthly waste", "evidence": "Evidence", "basis": "Basis"},
         empty="Nothing to recommend for this window and these filters.")
