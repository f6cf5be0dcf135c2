"""Chargeback: what each team and namespace spent, split into productive / false-util / idle / unobserved."""

from __future__ import annotations

import altair as alt
import streamlit as st
import ui

ctx = ui.current()
st.title("Chargeback")
ui.window_caption(ctx)
st.caption("Allocated GPU-hours × price per team (pod label `team`, else the namespace) and namespace. "
           "Unallocated GPUs and stranded MIG capacity are the fleet's, not a team's: shown apart. "
           "All parts add up to the fleet cost to the cent (the weekly report's numbers).")
labels = ui.analysis(ctx, "pod_labels")["label"].tolist()
clusters = ui.analysis(ctx, "teams")["namespace"].astype(str).str.contains("/").any()  # ingest --cluster
GROUPS = {"team": "Team", "namespace": "Namespace", **({"cluster": "Cluster"} if clusters else {}),
          **{f"label:{k}": f"Pod label: {k}" for k in labels}}
grouping = st.selectbox("Group by", list(GROUPS), format_func=GROUPS.get, key="charge_group",
                        help="Team and namespace, or any pod label the store knows (e.g. a cost center): "
                             "the same dollars, grouped differently.")
group_label = grouping.removeprefix("label:") if grouping.startswith("label:") else ""
frame = ui.chargeback(ctx, group_by=group_label)
if frame.empty:
    st.info("No GPUs priced in this window.")
    st.stop()
teams = ui.for_teams(ctx, frame[frame["kind"] == "team"])
fleet_parts = frame[frame["kind"].isin(["unallocated", "stranded"])]
problems = frame[frame["kind"].isin(ui.CHARGEBACK_PROBLEMS)]
for line in ui.chargeback_warnings(frame):  # unpriced use is never $0 inside a team: say so
    st.warning(f"Not in the costs below: {line}.")
if not ui.judged(ctx, "false_utilization"):  # no SM activity: false-util is unknown, never $0 (Readiness page)
    st.info("False utilization is **not judged** in this window (no SM activity, DCGM_FI_PROF_SM_ACTIVE): the "
            "false-util column is unknown, and 'productive' includes whatever of it there was.")
    teams = teams.assign(false_util_usd=float("nan"))
PARTS = {"productive_usd": "productive", "false_util_usd": "false-util", "idle_usd": "idle",
         "unobserved_usd": "unobserved"}
COLORS = ["#2e7d32", "#8e24aa", "#f9a825", "#90a4ae"]

cols = st.columns(5)
if ctx.scope is None:
    cols[0].metric("Fleet cost", ui.money(frame["fleet_cost_usd"].iloc[0]))
cols[1].metric("Teams' cost" if not ctx.teams else "Selected teams' cost", ui.money(teams["cost_usd"].sum()))
cols[2].metric("Idle + false-util", ui.money(teams["idle_usd"].sum() + teams["false_util_usd"].sum())
               if teams["false_util_usd"].notna().all() else ui.money(teams["idle_usd"].sum()) + " + unknown")
if ctx.scope is None:
    for col, kind, label in ((cols[3], "unallocated", "Unallocated"), (cols[4], "stranded", "Stranded MIG")):
        col.metric(label, ui.money(fleet_parts.loc[fleet_parts["kind"] == kind, "cost_usd"].sum()))


TOP = 25  # bars per chart: 500 teams stay readable (the rest are summed in the caption and listed in the table)


def stacked(by: str, title: str) -> tuple[alt.Chart, str]:
    """Stacked parts per ``by`` value for the TOP most costly ones; (chart, caption naming the rest)."""
    rows, rest = ui.top_and_rest(teams, by, list(PARTS), top=TOP)
    calc = "{" + ", ".join(f"'{k}': '{v}'" for k, v in PARTS.items()) + "}[datum.column]"
    chart = (
        alt.Chart(rows).transform_fold(list(PARTS), as_=["column", "usd"]).transform_calculate(part=calc)
        .mark_bar()
        .encode(x=alt.X("sum(usd):Q", title="USD", axis=ui.usd_axis()),
                y=alt.Y(f"{by}:N", sort="-x", title=None, axis=alt.Axis(labelLimit=260)),
                color=alt.Color("part:N", sort=list(PARTS.values()), title=None, legend=alt.Legend(orient="top"),
                                scale=alt.Scale(domain=list(PARTS.values()), range=COLORS)),
                tooltip=[f"{by}:N", "part:N", alt.Tooltip("sum(usd):Q", format="$,.2f")])
        # a fixed step per bar: the chart grows with its bars, never squeezes one bar to a line
        .properties(title=title, height=alt.Step(26))
    )
    caption = "" if rest is None else (f"Top {TOP} of {TOP + rest['count']} {by}s; the other {rest['count']} cost "
                                       f"{ui.money(rest['total'])} (all are in the table below).")
    return chart, caption


if group_label:
    teams = teams.assign(group_value=teams["group_value"].fillna(f"(no {group_label})"))
    charts = (("group_value", f"By pod label {group_label}"), ("team", "By team"))
elif grouping == "cluster":
    charts = (("cluster", "By cluster"), ("team", "By team"))
else:
    charts = (("team", "By team"), ("namespace", "By namespace"))
if not teams.empty:
    for by, title in charts:
        chart, caption = stacked(by, title)
        st.altair_chart(chart, width="stretch", height="content")
        if caption:
            st.caption(caption)
key = "group_value" if group_label else grouping
st.subheader(f"Subtotals by {'pod label ' + group_label if group_label else grouping}")
subtotals = teams.groupby(key, as_index=False)[["gpu_hours", "cost_usd", *PARTS]].sum(min_count=1).sort_values("cost_usd", ascending=False)
ui.table(subtotals, "chargeback_subtotals", empty="No team allocated a GPU in this window.",
         columns={key: group_label or GROUPS[grouping], "cost_usd": "Cost", "gpu_hours": "GPU-hours",
                  "idle_usd": "Idle", "false_util_usd": "False-util", "productive_usd": "Productive",
                  "unobserved_usd": "Unobserved"})
st.subheader("Rows (team × namespace" + (f" × {group_label})" if group_label else ")"))
ui.table(teams, "chargeback_teams", empty="No team allocated a GPU in this window.",
         columns={"team": "Team", "namespace": "Namespace", **({"cluster": "Cluster"} if clusters else {}),
                  **({"group_value": group_label} if group_label else {}),
                  "cost_usd": "Cost", "gpu_hours": "GPU-hours", "idle_usd": "Idle", "false_util_usd": "False-util"})
st.subheader("Prices applied")
st.caption("Per GPU model: the cluster's own price (bundle prices.csv, `ingest --prices FILE`, the chart's "
           "prices.models), else gpuwatch's dated list price where `ingest --prices list` enabled it, else unpriced.")
ui.table(ui.prices(ctx), "prices_applied", empty="No GPUs in the store.")
if ctx.scope is not None:  # a team view: the team's rows only
    st.download_button("Download chargeback.csv (your teams' rows)", ui.csvfile.to_csv(ui.chargeback_csv_rows(teams)).encode(),
                       file_name="chargeback.csv", mime="text/csv", key="csv_chargeback_my_teams")
    st.stop()
st.subheader("Fleet: unallocated and stranded")
ui.table(fleet_parts[["kind", "team", "cost_usd", "share_of_fleet"]], "chargeback_fleet",
         empty="Nothing unallocated or stranded.")
if not problems.empty:
    st.subheader("Data problems: GPU-hours without a cost")
    ui.table(ui.for_teams(ctx, problems)[["kind", "team", "namespace", "gpu_hours", "pods"]], "chargeback_problems",
             empty="No unpriced or over-allocated GPU-hours for the selected teams.")
st.download_button("Download chargeback.csv (all rows, as in the weekly report)",
                   ui.csvfile.to_csv(ui.chargeback_csv_rows(frame)).encode(), file_name="chargeback.csv", mime="text/csv",
                   key="csv_chargeback_all")
