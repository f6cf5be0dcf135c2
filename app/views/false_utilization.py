"""False utilization: pods whose GPU looks busy (GPU_UTIL) while the SMs and tensor cores are not."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("False utilization")
ui.window_caption(ctx)
st.caption("GPU_UTIL only says *a kernel was resident*. A sample is falsely utilized when reported ≥ 50 % "
           "but SM activity < 25 % (spin-waits, NCCL hangs, data starvation). Needs DCGM profiling "
           "fields; pods without them are never flagged (unknown is not guessed).")
if ui.not_judged(ctx, "false_utilization"):  # no SM activity: no pod is judged; the partial evidence, under its name
    st.subheader("Busy without tensor or DRAM work (partial evidence)")
    st.caption("What dcgm-exporter's default counters can show: GPU_UTIL high while tensor and DRAM activity both "
               "stay near 0. Weaker than false utilization (an FP32 kernel working from cache uses neither pipe): "
               "a lead to investigate, never counted as false utilization or as savings.")
    busy = ui.for_teams(ctx, ui.analysis(ctx, "busy_without_work"))
    suspects = busy[busy["suspect"].fillna(False).astype(bool)]
    cols = st.columns(3)
    cols[0].metric("Suspect pods", f"{len(suspects)} of {len(busy)}")
    cols[1].metric("Suspect GPU-hours", f"{suspects['suspect_gpu_hours'].sum():,.1f}")
    cols[2].metric("At stake", ui.money(suspects["suspect_cost_usd"].sum()), help="Investigate; not a saving.")
    ui.table(suspects, "busy_without_work", empty="No pod looked busy while its tensor and DRAM pipes idled.")
    st.stop()
frame = ui.for_teams(ctx, ui.analysis(ctx, "false_utilization"))
offenders_only = st.toggle("Offenders only", value=True, key="false_offenders_only",
                           help="Pods with at least half of their judged time falsely utilized.")
shown = frame[frame["offender"].fillna(False).astype(bool)] if offenders_only else frame
cols = st.columns(4)
cols[0].metric("Offending pods", f"{int(shown['offender'].fillna(False).astype(bool).sum())}")
cols[1].metric("False-util GPU-hours", f"{shown['false_util_gpu_hours'].sum():,.1f}")
cols[2].metric("False-util cost", ui.money(shown["false_util_cost_usd"].sum()),
               help="Cost of the GPU-hours that looked busy but were not.")
cols[3].metric("Cost of the gap", ui.money(shown["gap_cost_usd"].sum()),
               help="Cost weighted by (reported − effective) utilization.")
ranked = shown.sort_values("false_util_cost_usd", ascending=False)
ui.table(ranked, "false_utilization",
         empty="No falsely-utilized pods among the pods judged in this window (those with SM activity): where "
               "their GPUs look busy, the SMs are busy too.")

if not ranked.empty:
    st.subheader("Per-pod time series")
    labels = (ranked["namespace"].astype(str) + "/" + ranked["pod"].astype(str)).tolist()
    choice = st.selectbox("Pod", range(len(labels)), format_func=labels.__getitem__, key="false_pod")
    pick = ranked.iloc[choice]
    series = ui.analysis(ctx, "pod_timeseries", namespace=pick["namespace"], pod=pick["pod"], bucket_seconds=600)
    if series.empty:
        st.info("No samples for this pod in the window.")
    else:
        signal, names = ui.legend_names(["reported_util", "effective_util", "tensor_active"])
        chart = alt.Chart(series).transform_fold(
            ["reported_util", "effective_util", "tensor_active"], as_=["column", "value"]).transform_calculate(
            signal=signal).mark_line().encode(
            x=alt.X("bucket_start:T", title="time (UTC)"),
            y=alt.Y("value:Q", title="utilization", axis=alt.Axis(format="%")),
            color=alt.Color("signal:N", scale=alt.Scale(range=["#1565c0", "#6a1b9a", "#00897b"]), title=None,
                            sort=names, legend=alt.Legend(orient="top")),
            tooltip=["bucket_start:T", "signal:N", alt.Tooltip("value:Q", format=".1%")],
        )
        st.altair_chart(chart, width="stretch", height=280)
        ui.table(series, "pod_timeseries", empty="No samples.")
