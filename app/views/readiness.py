"""Readiness: which signals the store holds per GPU node in the window, which findings each missing one
blinds, and the exact config that enables it (the same verdicts as `gpuwatch doctor --db` and analyze)."""

from __future__ import annotations

import pandas as pd
import streamlit as st
import ui

from gpuwatch import signals

ctx = ui.current()
st.title("Readiness")
ui.window_caption(ctx)
st.caption("A finding judges only with the signals it has: without one it is **not judged** (unknown, never $0) or "
           "judged on less evidence. `gpuwatch doctor --from prometheus://…` asks Prometheus the same before ingesting.")
coverage = ui.analysis(ctx, "signal_coverage")
verdict = ui.judgement(ctx)

STATE_ICON = {"not judged": "✖ not judged", "partly judged": "◐ partly judged", "unverified": "? unverified",
              "judged": "✔ judged"}
cols = st.columns(4)
for col, state in zip(cols, ("not judged", "partly judged", "unverified", "judged"), strict=True):
    col.metric(STATE_ICON[state].split(" ", 1)[1].capitalize(), f"{int((verdict['state'] == state).sum())} findings")

st.subheader("Findings")
shown = verdict.assign(state=verdict["state"].map(STATE_ICON))[["finding", "state", "reason"]]
order = {s: i for i, s in enumerate(("✖ not judged", "◐ partly judged", "? unverified", "✔ judged"))}
shown = shown.sort_values("state", key=lambda s: s.map(order), kind="stable")
ui.table(shown, "readiness_findings", empty="No findings.",
         columns={"finding": "Finding", "state": "State", "reason": "Why"})


def cell(row) -> str:
    """One signal on one node, in words."""
    if pd.isna(row["present"]):
        return "? not recorded"
    if pd.notna(row["expected"]) and int(row["expected"]) == 0:
        return "– nothing to check"
    if not bool(row["present"]):
        return "✖ missing"
    if pd.notna(row["expected"]) and int(row["observed"]) < int(row["expected"]):
        return f"◐ {int(row['observed'])} of {int(row['expected'])}"
    return "✔ present"


st.subheader("Signals per GPU node")
labels = {name: s.label for name, s in signals.SIGNALS.items()}
per_node = coverage[coverage["node"].notna()]
if per_node.empty:
    st.info("No GPU nodes in the store.")
else:
    grid = (per_node.assign(value=per_node.apply(cell, axis=1), signal=per_node["signal"].map(labels))
            .pivot(index="node", columns="signal", values="value").reset_index())
    ui.table(grid, "readiness_nodes", empty="No GPU nodes in the store.", columns={"node": "Node"})
cluster = coverage[coverage["node"].isna()]
st.subheader("Cluster-wide")
ui.table(cluster.assign(value=cluster.apply(cell, axis=1), signal=cluster["signal"].map(labels))[["signal", "value"]],
         "readiness_cluster", empty="Nothing cluster-wide.", columns={"signal": "Signal", "value": "In the store"})

missing = [name for name in signals.SIGNALS
           if (rows := coverage[(coverage["signal"] == name) & (coverage["expected"].isna() | (coverage["expected"] > 0))])
           .shape[0] and rows["present"].eq(False).any()]
if missing:
    st.subheader("To enable")
    st.caption("Each config once; a missing signal blinds the findings listed above.")
    for block in signals.enable(*missing):
        where, _, config = block.partition(":\n")
        st.markdown(f"**{where}**")
        st.code("\n".join(line[2:] for line in config.splitlines()), language="yaml")
else:
    st.success("Every signal gpuwatch reads is in the store for this window.")
