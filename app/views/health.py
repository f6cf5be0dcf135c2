"""Health & fit: the failure modes that burn GPU money without an error anyone sees as a cost.

One tab per finding (docs/architecture.md#finding-semantics): GPUs with XID/ECC/row-remap/lost events
under pods, MIG slices too small for their model, memory held by no pod, driver drift, gangs holding
GPUs idle while siblings wait. Each shows its evidence, and a time series where it helps.
"""

from __future__ import annotations

import altair as alt
import pandas as pd
import streamlit as st
import ui

ctx = ui.current()
st.title("Health & fit")
ui.window_caption(ctx)
st.caption("Failures that no utilization dashboard names: each finding with its evidence and what it costs. "
           "Unknown is never guessed: a finding needs its signals (kube-state-metrics pod status, driver "
           "versions, health events); without them its tab says what is missing.")

frames = {name: ui.analysis(ctx, name) for name in
          ("unhealthy_gpu", "mig_mismatch", "orphaned_memory", "driver_drift", "gang_stall")}
mismatch = ui.for_teams(ctx, frames["mig_mismatch"])
if ctx.teams:  # a GPU with events counts for a team when one of its pods is the team's
    unhealthy = frames["unhealthy_gpu"]
    # a boolean mask even when there are no rows (an empty object Series would select columns)
    mine = unhealthy["teams"].fillna("").map(lambda teams: bool(set(teams.split(",")) & set(ctx.teams)))
    frames["unhealthy_gpu"] = unhealthy[mine.astype(bool)]

cols = st.columns(5)
hardware = frames["unhealthy_gpu"][frames["unhealthy_gpu"]["severity"] == "hardware"]
cols[0].metric("Failing GPUs under pods", f"{hardware.loc[hardware['pods'].fillna('') != '', 'gpu_uuid'].nunique()}",
               help="GPUs with hardware-class health events while pods held them.")
cols[1].metric("Burnt by too-small slices", ui.money(ui.too_small(mismatch)["usd_burnt"].sum()),
               help="GPU time of runs that failed at their device's memory limit.")
cols[2].metric("Memory held by no pod", ui.money(frames["orphaned_memory"]["usd_unusable"].sum()),
               help="Cost of devices unusable because a process outlived its pod.")
blamed = frames["driver_drift"][frames["driver_drift"]["blamed"].fillna(False).astype(bool)]
cols[3].metric("Lost to driver drift", ui.money(blamed["usd_lost"].sum()),
               help="GPU time of pods that failed to start on a blamed driver version.")
stalls = frames["gang_stall"][frames["gang_stall"]["kind"] == "partial_allocation"]
cols[4].metric("Held idle by stalled gangs", ui.money(stalls["usd_held_idle"].sum()),
               help="Idle GPUs jobs held while their sibling pods were Pending.")

tabs = st.tabs(["Unhealthy GPUs", "MIG fit", "Orphaned memory", "Driver drift", "Gang stalls"])
with tabs[0]:
    st.caption("XID, ECC double-bit, row-remap failures and lost GPUs, with the pods and teams on them. "
               "Hardware-class events: cordon, drain, reset or RMA. Application XIDs (13, 31, 43, 45): the workload.")
    ui.table(frames["unhealthy_gpu"], "unhealthy_gpu", empty="No health events in this window.",
             columns={"node": "node", "gpu_uuid": "GPU", "kind": "event", "code": "code", "severity": "severity",
                      "pods": "pods", "allocated_usd_at_risk": "allocated cost at risk"})
with tabs[1]:
    st.caption("Pods that keep failing at their device's memory limit. A CUDA out-of-memory ends as Error with a "
               "non-zero exit code (cause gpu_memory: the profile is too small); OOMKilled is the container's host "
               "memory limit (cause host_memory: a bigger GPU would not help).")
    ui.table(mismatch, "mig_mismatch", empty="No pod failed repeatedly at its GPU's memory limit.",
             columns={"namespace": "namespace", "pod": "pod", "mig_profile": "profile", "failed_runs": "failed runs",
                      "cause": "cause", "recommended_profile": "fits", "usd_burnt": "burnt"})
    if not mismatch.empty:
        labels = (mismatch["namespace"] + "/" + mismatch["pod"]).tolist()
        pick = mismatch.iloc[st.selectbox("Pod", range(len(labels)), format_func=labels.__getitem__, key="fit_pod")]
        series = ui.analysis(ctx, "pod_timeseries", namespace=pick["namespace"], pod=pick["pod"], bucket_seconds=300)
        if not series.empty:
            limit = pd.DataFrame({"limit": [float(pick["fb_total_bytes"])]})
            line = alt.Chart(series).mark_line(color="#1565c0").encode(
                x=alt.X("bucket_start:T", title="time (UTC)"),
                y=alt.Y("fb_used_bytes:Q", title="GPU memory used (bytes)"),
                tooltip=["bucket_start:T", alt.Tooltip("fb_used_bytes:Q", format=",.0f")])
            rule = alt.Chart(limit).mark_rule(color="#c62828", strokeDash=[4, 4]).encode(y="limit:Q")
            st.altair_chart(line + rule, width="stretch", height=260)
            st.caption("Memory per 5 minutes against the device's size (dashed): each crash follows a climb to the limit.")
with tabs[2]:
    st.caption("Devices holding memory above their empty baseline while no pod is allocated (the kubelet keeps "
               "ended pods listed for a while: those do not count as holders). Drain the node and reset the GPU.")
    ui.table(frames["orphaned_memory"], "orphaned_memory", empty="No device held memory without a pod.",
             columns={"node": "node", "gpu_uuid": "GPU", "mig_gi_id": "MIG instance", "since": "since",
                      "seconds": "seconds", "max_fb_used_bytes": "memory held", "usd_unusable": "cost"})
with tabs[3]:
    st.caption("GPU pools whose nodes run different drivers, and whether failed starts concentrate on one version.")
    ui.table(frames["driver_drift"], "driver_drift", empty="Every pool runs one driver version (or versions are unknown).",
             columns={"pool": "pool", "driver_version": "driver", "nodes": "nodes", "failed_starts": "failed starts",
                      "failure_rate": "failure rate", "blamed": "blamed", "usd_lost": "lost"})
with tabs[4]:
    st.caption("Jobs holding GPUs idle while sibling pods wait in Pending (partial allocation), and GPUs that lag "
               "their synchronous job's median SM activity (stragglers).")
    ui.table(frames["gang_stall"], "gang_stall", empty="No job held idle GPUs while waiting for siblings.",
             columns={"kind": "kind", "namespace": "namespace", "job": "job", "since": "since", "seconds": "seconds",
                      "gpus_held": "GPUs held", "pods_pending": "pods pending", "usd_held_idle": "cost"})
