"""Reclaim audit: what the auto-reclaim controller decided and did (read-only)."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("Reclaim audit")
ui.window_caption(ctx)
frame = ui.for_teams(ctx, ui.analysis(ctx, "reclaim_audit"))
if frame.empty:
    st.info("No reclaim decisions in this window. The reclaim controller (`gpuwatch reclaim`) writes one row "
            "per decision to this database's `reclaim_audit` table; it is off by default (Helm "
            "`reclaim.enabled: false`) and dry-run unless started with `--apply`. Either it has not run "
            "against this database, or it found nothing to do in this window.")
    st.stop()
cols = st.columns(4)
cols[0].metric("Decisions", f"{len(frame)}")
cols[1].metric("Acted", f"{int((frame['decision'] == 'acted').sum())}")
cols[2].metric("Would act (dry-run)", f"{int((frame['decision'] == 'would_act').sum())}")
cols[3].metric("Errors", f"{int((frame['result'] == 'error').sum())}")
chart = alt.Chart(frame).mark_bar().encode(
    x=alt.X("count():Q", title="decisions", axis=alt.Axis(tickMinStep=1, format="d")),
    y=alt.Y("decision:N", title=None, axis=alt.Axis(labelLimit=240)),
    color=alt.Color("result:N", legend=alt.Legend(orient="top")), tooltip=["decision:N", "result:N", "count():Q"])
st.altair_chart(chart.properties(height=alt.Step(32)), width="stretch", height="content")
ui.table(frame, "reclaim_audit", empty="No decisions.")
