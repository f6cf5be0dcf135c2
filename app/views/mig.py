"""MIG: every MIG GPU's 8 memory slices (in use / idle instance / free / stranded) and the repack plan."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("MIG")
ui.window_caption(ctx)
st.caption("Each row is a MIG-enabled GPU, each cell one of its 8 memory slices, at the end of the window. "
           "*Stranded* slices are free but no profile requested in this window can be placed on them "
           "(placement rules: NVIDIA's MIG placement table). The right-hand map is the cheapest repack of the in-use instances.")
summary = ui.analysis(ctx, "mig_fragmentation")
slices = ui.analysis(ctx, "mig_layout", fragmentation=summary)  # reuse: no second placement search
if summary.empty:
    st.info("No MIG-enabled GPUs in this database: nothing can be fragmented.")
    st.stop()

ok = summary[summary["problem"].fillna("") == ""]
cols = st.columns(4)
cols[0].metric("MIG GPUs", f"{len(summary)}")
cols[1].metric("Free slices", f"{int(ok['free_slices'].sum())}")
cols[2].metric("Stranded slices", f"{int(ok['stranded_slices'].sum())}")
cols[3].metric("Repack moves", f"{int(ok['repack_moves'].sum())}")

STATES = ["in use", "idle instance", "free", "stranded"]
COLORS = ["#2e7d32", "#f9a825", "#cfd8dc", "#e53935"]
if not slices.empty:
    labelled = slices.assign(gpu=slices["node"].astype(str) + " · " + slices["gpu_uuid"].astype(str).str[:12])
    gpus = sorted(labelled["gpu"].unique())
    height = 36 * len(gpus) + 40

    def slice_map(layout: str, title: str) -> alt.LayerChart:
        part = labelled[labelled["layout"] == layout]
        base = alt.Chart(part).encode(
            x=alt.X("slice:O", title="memory slice"),
            y=alt.Y("gpu:N", sort=gpus, title=None, axis=alt.Axis(labelLimit=260)))
        cells = base.mark_rect(stroke="white", strokeWidth=2).encode(
            color=alt.Color("state:N", scale=alt.Scale(domain=STATES, range=COLORS)),
            tooltip=["gpu:N", "slice:O", "state:N", "instance:N", "namespace:N", "pod:N"])
        text = base.mark_text(fontSize=9).encode(text=alt.Text("label:N"))
        return alt.layer(cells, text).properties(title=title, height=height, width="container")

    left, right = st.columns(2)
    # explicit element height: Streamlit's default ("content") squeezes nominal-axis charts
    left.altair_chart(slice_map("current", "Now"), width="stretch", height=height + 60)
    right.altair_chart(slice_map("repack", "After repack"), width="stretch", height=height + 60)
ui.table(summary, "mig_fragmentation", empty="No MIG GPUs.")
problems = summary[summary["problem"].fillna("") != ""]
if not problems.empty:
    st.warning(f"{len(problems)} GPU(s) have notes or placement problems; see the `problem` column.")
