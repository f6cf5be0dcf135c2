"""Recommendations: what to do about the waste, with evidence and monthly savings; filter and download."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("Recommendations")
ui.window_caption(ctx)
st.caption("From gpuwatch.recommendations: reclaim idle hoarders, right-size or repack MIG, investigate "
           "false utilization. Savings are monthly (hourly saving × 730 h).")
frame = ui.for_teams(ctx, ui.recommendation_frame(ctx))
kinds = sorted(frame["kind"].dropna().unique())
picked = st.multiselect("Kind", kinds, key="recs_kind", placeholder="All kinds")
shown = frame[frame["kind"].isin(picked)] if picked else frame
cols = st.columns(2)
cols[0].metric("Recommendations", f"{len(shown)}")
cols[1].metric("Monthly savings", ui.money(shown["monthly_savings_usd"].sum()))
if not shown.empty:
    chart = alt.Chart(shown).mark_bar().encode(
        x=alt.X("sum(monthly_savings_usd):Q", title="monthly savings (USD)"),
        y=alt.Y("kind:N", sort="-x", title=None, axis=alt.Axis(labelLimit=240)),
        color=alt.Color("kind:N", legend=None),
        tooltip=["kind:N", "count():Q", alt.Tooltip("sum(monthly_savings_usd):Q", format="$,.2f")],
    )
    st.altair_chart(chart, width="stretch", height=40 * len(kinds) + 60)
ui.table(shown, "recommendations", empty="Nothing to recommend for this window and these filters.")
