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
charge = ui.chargeback(ctx)
recs = ui.recommendation_frame(ctx)
repacks = recs[recs["kind"] == "repack_mig"]
names = ui.gpu_names(slices if not slices.empty else summary)
cols = st.columns(5)
cols[0].metric("MIG GPUs", f"{len(summary)}")
cols[1].metric("Stranded slices", f"{int(ok['stranded_slices'].sum())} of {8 * len(ok)}",
               help="Free memory slices no profile requested in this window can be placed on.")
cols[2].metric("Stranded cost", ui.money(charge.loc[charge["kind"] == "stranded", "cost_usd"].sum()),
               help="This window's cost of stranded capacity (Chargeback's 'stranded MIG' row).")
cols[3].metric("Repacks save / month", ui.money(repacks["monthly_savings_usd"].sum()),
               help="Run-rate of the stranded cost the repacks free (Recommendations, kind repack).")
cols[4].metric("Instances to move", f"{int(ok['repack_moves'].sum())}")

STATES = ["in use", "idle instance", "free", "stranded"]
COLORS = ["#2e7d32", "#f9a825", "#cfd8dc", "#e53935"]
if not slices.empty:
    labelled = slices.assign(gpu=slices["gpu_uuid"].map(names))
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
st.subheader("Repack moves: which pod goes where")
moved = slices[(slices["layout"] == "repack") & slices["moved_from"].notna()].drop_duplicates(["gpu_uuid", "instance"])
if moved.empty:
    st.info("No repack needs a move: every MIG GPU is already laid out as well as it can be for this window's demand.")
else:
    spans = ui.slice_spans(slices)
    plan = moved.assign(gpu=moved["gpu_uuid"].map(names), profile=moved["instance"].str.rsplit("@", n=1).str[0],
                        owner=moved["namespace"].fillna("") + "/" + moved["pod"].fillna("(no pod)"),
                        move=[f"{spans[('current', g, src)]} → {spans[('repack', g, dst)]}" for g, src, dst in
                              zip(moved["gpu_uuid"], moved["moved_from"], moved["instance"], strict=True)])
    ui.table(plan[["gpu", "owner", "profile", "move"]], "mig_repack_moves", empty="No moves.",
             columns={"gpu": "GPU", "owner": "Pod (namespace/pod)", "profile": "Profile", "move": "Memory slices"})
    st.caption("A move destroys the instance and creates it at the new place: the pod restarts on it. Idle instances "
               "(no pod) are destroyed, not moved.")
st.subheader("MIG GPUs")
table = summary.assign(gpu=summary["gpu_uuid"].map(names)).merge(
    repacks[["gpu_uuid", "monthly_waste_usd", "monthly_savings_usd"]], on="gpu_uuid", how="left")
ui.table(table, "mig_fragmentation", empty="No MIG GPUs.",
         columns={"gpu": "GPU", "gpu_model": "Model", "instances": "Instances now", "stranded_slices": "Stranded slices",
                  "repack_layout": "Repack to", "repack_moves": "Moves", "monthly_waste_usd": "Stranded $/month",
                  "monthly_savings_usd": "Repack saves $/month"})
problems = summary[summary["problem"].fillna("") != ""]
if not problems.empty:
    st.warning(f"{len(problems)} GPU(s) have notes or placement problems; see the `problem` column.")
